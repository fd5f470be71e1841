"""A user's cost does not grow with their history (issue 13), on real PostgreSQL.

Floods of refused calls and of repeats are counted per window instead of
logged one event each, and a decision folds the stream's snapshot plus the
events after it, so the next request of a user refused thousands of times
reads as little as a fresh user's. The rules still hold exactly.
"""

from __future__ import annotations

import functools
import random
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, text

from domain.counting import BOUND_KEYS_PER_WINDOW, RequestsCounted
from domain.errors import TokenInvalid
from domain.request_rules import IdempotencyKeyBound
from domain.otp import RequestOtp
from domain.otp_events import OtpRequestRefused, otp_stream
from domain.otp_state import fold_otp
from domain.reset import RequestReset
from domain.reset_events import ResetRequestRefused, ResetRequested, ResetTokenRejected, reset_stream
from domain.reset_state import fold_reset
from infra.clock import ManualClock
from infra.errors import RateLimited
from infra.eventlog.personal_data import ERASED
from infra.eventlog.postgres import PostgresEventStore
from infra.projector.registry import projection_named
from infra.projector.verify import verify
from infra.review.history import history
from infra.services.closed_counts import write_all_closed_counts
from infra.services.otp import request_otp
from infra.services.privacy import forget
from infra.services.reset import consume_token, request_reset
from infra.services.unit_of_work import ServiceContext, load_state
from tests.support.log_reading import stream_events
from tests.support.replay import assert_projections_match_log
from tests.support.secrets import reset_token_of

ADA = "ada@example.test"
REFUSALS = 2_000  # bench/one_user.py takes this to 10,000; the bound does not depend on it


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many events each load of a stream decoded, in call order."""
    counts: list[int] = []
    original = PostgresEventStore._decode_all

    def counting(self: PostgresEventStore, rows: object) -> object:
        recorded = original(self, rows)  # type: ignore[arg-type]
        counts.append(len(recorded))
        return recorded

    monkeypatch.setattr(PostgresEventStore, "_decode_all", counting)
    yield counts


def set_clock(clock: ManualClock, moment: datetime) -> None:
    clock.advance(moment - clock.now())


def use_up_the_hour(ctx: ServiceContext, clock: ManualClock, user: str) -> None:
    for _ in range(ctx.reset_policy.hourly_limit):
        request_reset(ctx, RequestReset(user, ADA))
        clock.advance(ctx.reset_policy.cooldown + timedelta(seconds=1))


def refuse(ctx: ServiceContext, user: str, times: int, client: str | None = None) -> None:
    for n in range(times):
        with pytest.raises(RateLimited):
            request_reset(ctx, RequestReset(user, ADA, idempotency_key=f"k-{n}", client=client))


@pytest.mark.slow
def test_thousands_of_refusals_write_two_events_and_the_next_request_decodes_none_of_them(
    ctx: ServiceContext, engine: Engine, clock: ManualClock, decoded: list[int]
) -> None:
    set_clock(clock, datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
    use_up_the_hour(ctx, clock, "victim")
    before = len(stream_events(engine, reset_stream("victim")))
    refuse(ctx, "victim", REFUSALS, client="app")
    stream = stream_events(engine, reset_stream("victim"))
    assert len(stream) == before + 1, "the first refusal is logged, the rest are counted"

    decoded.clear()
    refuse(ctx, "victim", 1)
    assert sum(decoded) == 0, "the snapshot stands in for the stream: no event is decoded"

    clock.advance(timedelta(hours=1))
    request_reset(ctx, RequestReset("victim", ADA))
    events = stream_events(engine, reset_stream("victim"))[before:]
    assert isinstance(events[0], ResetRequestRefused)
    counted = events[1]
    assert isinstance(counted, RequestsCounted) and counted.answer == "refused"
    assert counted.count == REFUSALS and set(counted.clients) == {"app", None}
    assert isinstance(events[-1], ResetRequested) and len(events) <= 4, "summary, supersession, new request"
    told = history(engine, "victim", now=clock.now()).render()
    assert f"{REFUSALS} further reset requests were refused (rate_limited)" in told
    assert f"{REFUSALS} more calls refused (rate_limited)" in told and "by client app, no client" in told
    assert_projections_match_log(engine)


def test_a_fresh_users_request_decodes_as_much_as_a_victims(
    ctx: ServiceContext, clock: ManualClock, decoded: list[int]
) -> None:
    use_up_the_hour(ctx, clock, "victim")
    refuse(ctx, "victim", 200)
    clock.advance(timedelta(hours=1))
    decoded.clear()
    request_reset(ctx, RequestReset("victim", ADA))
    request_reset(ctx, RequestReset("fresh", ADA))
    assert sum(decoded) == 0, "neither decodes an event (nor reads one: the snapshot says none follow it)"


def test_refusals_are_logged_once_per_window_and_the_hourly_limit_holds_across_windows(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    set_clock(clock, datetime(2026, 3, 2, 10, 50, tzinfo=UTC))
    use_up_the_hour(ctx, clock, "42")  # five requests, 10:50 to 10:55
    refuse(ctx, "42", 3)  # 10:55, three counted in the 10:00 window
    set_clock(clock, datetime(2026, 3, 2, 11, 10, tzinfo=UTC))
    refuse(ctx, "42", 3)  # the limit still holds across the hour of the clock
    set_clock(clock, datetime(2026, 3, 2, 11, 51, tzinfo=UTC))
    request_reset(ctx, RequestReset("42", ADA))  # the first request left the hour

    tail = stream_events(engine, reset_stream("42"))[-6:]
    assert [type(e).__name__ for e in tail] == [
        "ResetRequestRefused", "RequestsCounted", "ResetRequestRefused", "RequestsCounted",
        "ResetSuperseded", "ResetRequested",
    ]
    assert [e.count for e in tail if isinstance(e, RequestsCounted)] == [2, 2]
    assert [e.window_start.hour for e in tail if isinstance(e, RequestsCounted)] == [10, 11]
    assert_projections_match_log(engine)


def test_repeats_bind_a_bounded_number_of_keys_and_the_bound_ones_still_replay(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    first = request_reset(ctx, RequestReset("7", ADA, idempotency_key="k-first"))
    repeats = [request_reset(ctx, RequestReset("7", ADA, idempotency_key=f"k-{n}")) for n in range(50)]
    assert {r.request_id for r in repeats} == {first.request_id}

    clock.advance(ctx.reset_policy.cooldown + timedelta(seconds=1))
    bound = request_reset(ctx, RequestReset("7", ADA, idempotency_key="k-0"))
    assert bound.replayed and bound.request_id == first.request_id
    counted = request_reset(ctx, RequestReset("7", ADA, idempotency_key="k-49"))
    assert not counted.reused, "a counted key was never bound: after the cooldown it is decided afresh"

    events = stream_events(engine, reset_stream("7"))
    assert sum(isinstance(e, IdempotencyKeyBound) for e in events) == BOUND_KEYS_PER_WINDOW
    summary = next(e for e in events if isinstance(e, RequestsCounted))
    assert (summary.answer, summary.count) == ("reused", 50 - BOUND_KEYS_PER_WINDOW)
    assert_projections_match_log(engine)


def test_otp_refusals_are_counted_and_the_snapshot_verifies(
    ctx: ServiceContext, engine: Engine, admin_engine: Engine, clock: ManualClock
) -> None:
    for _ in range(ctx.otp_policy.hourly_limit):
        request_otp(ctx, RequestOtp("9", ADA))
        clock.advance(ctx.otp_policy.cooldown + timedelta(seconds=1))
    for _ in range(100):
        with pytest.raises(RateLimited):
            request_otp(ctx, RequestOtp("9", ADA, client="app"))
    refusals = [e for e in stream_events(engine, otp_stream("9")) if isinstance(e, OtpRequestRefused)]
    assert len(refusals) == 1

    report = verify(admin_engine, projection_named("stream_snapshots"))
    assert report.ok, report.summary()
    with engine.connect() as connection:
        counts = connection.execute(text("SELECT answer, count FROM request_counts")).all()
    assert [tuple(row) for row in counts] == [("refused", 99)]


def test_a_snapshot_holds_no_address_and_forgetting_the_user_erases_it_from_what_decisions_read(
    ctx: ServiceContext, engine: Engine
) -> None:
    request_reset(ctx, RequestReset("5", ADA))
    request_otp(ctx, RequestOtp("5", ADA))
    with engine.connect() as connection:
        stored = connection.execute(text("SELECT state::text FROM stream_snapshots")).scalars().all()
    assert len(stored) == 2 and not any(ADA in state for state in stored)
    assert [r.recipient for r in load_state(ctx, reset_stream("5"), fold_reset).requests.values()] == [ADA]

    forget(ctx, "5", reason="ticket 5")

    assert [r.recipient for r in load_state(ctx, reset_stream("5"), fold_reset).requests.values()] == [ERASED]
    assert [c.recipient for c in load_state(ctx, otp_stream("5"), fold_otp).challenges.values()] == [ERASED]


def test_a_replayed_key_of_a_counted_refusal_is_answered_the_same(ctx: ServiceContext, clock: ManualClock) -> None:
    use_up_the_hour(ctx, clock, "8")
    answers = []
    for _ in range(3):  # logged, counted, counted
        with pytest.raises(RateLimited) as refused:
            request_reset(ctx, RequestReset("8", ADA, idempotency_key="same", client="app"))
        answers.append(refused.value.retry_at)
    assert len(set(answers)) == 1


def test_every_refusal_and_rejection_reaches_the_log_when_threads_refuse_and_append_at_once(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    # An append empties the counts its stream's read returned, under the stream's lock: counting and
    # emptying from real threads at once must lose no call and write none twice.
    made = []
    for _ in range(ctx.reset_policy.hourly_limit):
        made.append(request_reset(ctx, RequestReset("victim", ADA)))
        clock.advance(ctx.reset_policy.cooldown + timedelta(seconds=1))
    superseded = [reset_token_of(engine, ctx.keys, outcome.request_id) for outcome in made[:-1]]
    answers: list[str] = []  # list.append is atomic: the threads share it

    def create() -> None:
        with pytest.raises(RateLimited):
            request_reset(ctx, RequestReset("victim", ADA))
        answers.append("refused")

    def present(token: str) -> None:
        with pytest.raises(TokenInvalid, match="replaced"):
            consume_token(ctx, token)
        answers.append("rejected")

    calls = [create] * 40 + [functools.partial(present, token) for token in superseded * 4]
    random.Random(7).shuffle(calls)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda call: call(), calls))
    clock.advance(timedelta(hours=1))
    request_reset(ctx, RequestReset("victim", ADA))  # writes whatever is still counted

    events = stream_events(engine, reset_stream("victim"))
    counted: Counter[str] = Counter()
    for event in events:
        if isinstance(event, RequestsCounted):
            counted[event.answer] += event.count
    assert sum(isinstance(e, ResetRequestRefused) for e in events) + counted["refused"] == 40
    assert sum(isinstance(e, ResetTokenRejected) for e in events) + counted["rejected"] == 16
    assert Counter(answers) == {"refused": 40, "rejected": 16}
    with engine.connect() as connection:
        left = connection.execute(text("SELECT count(*) FROM request_counts WHERE stream_id = :s"),
                                  {"s": reset_stream("victim")}).scalar_one()
    assert left == 0
    assert_projections_match_log(engine)


def test_a_floods_count_reaches_the_log_once_its_hour_closes_and_the_victims_next_request_writes_none(
    ctx: ServiceContext, engine: Engine, admin_engine: Engine, clock: ManualClock
) -> None:
    set_clock(clock, datetime(2026, 3, 2, 10, 0, tzinfo=UTC))
    use_up_the_hour(ctx, clock, "victim")
    refuse(ctx, "victim", 50, client="app")  # the first logged, 49 counted in the 10:00 window
    set_clock(clock, datetime(2026, 3, 2, 10, 59, 59, tzinfo=UTC))
    assert write_all_closed_counts(ctx) == 0, "a window still open keeps counting"

    set_clock(clock, datetime(2026, 3, 2, 11, 0, 30, tzinfo=UTC))
    assert write_all_closed_counts(ctx) == 1
    assert write_all_closed_counts(ctx) == 0, "written once"
    counted = stream_events(engine, reset_stream("victim"))[-1]
    assert isinstance(counted, RequestsCounted) and (counted.count, counted.clients) == (49, ("app",))
    assert "49 more calls refused (rate_limited)" in history(engine, "victim", now=clock.now()).render()
    assert verify(admin_engine, projection_named("stream_snapshots")).ok

    before = len(stream_events(engine, reset_stream("victim")))
    clock.advance(timedelta(hours=1))
    request_reset(ctx, RequestReset("victim", ADA))
    added = stream_events(engine, reset_stream("victim"))[before:]
    assert not any(isinstance(e, RequestsCounted) for e in added)
    assert_projections_match_log(engine)


def test_no_call_is_lost_or_written_twice_when_closed_counts_are_written_while_threads_refuse(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    set_clock(clock, datetime(2026, 3, 2, 10, 30, tzinfo=UTC))
    use_up_the_hour(ctx, clock, "victim")
    refuse(ctx, "victim", 30)  # counted in the 10:00 window, which closes below while calls still come
    set_clock(clock, datetime(2026, 3, 2, 11, 5, tzinfo=UTC))

    def create() -> None:
        with pytest.raises(RateLimited):
            request_reset(ctx, RequestReset("victim", ADA))

    calls = [create] * 60 + [lambda: write_all_closed_counts(ctx)] * 20
    random.Random(11).shuffle(calls)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda call: call(), calls))
    set_clock(clock, datetime(2026, 3, 2, 12, 0, 1, tzinfo=UTC))
    write_all_closed_counts(ctx)

    events = stream_events(engine, reset_stream("victim"))
    refused = sum(isinstance(e, ResetRequestRefused) for e in events)
    counted = sum(e.count for e in events if isinstance(e, RequestsCounted))
    assert refused + counted == 90
    assert [e.window_start.hour for e in events if isinstance(e, RequestsCounted)] == [10, 11]
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM request_counts")).scalar_one() == 0
    assert_projections_match_log(engine)
