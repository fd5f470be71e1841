"""A user's log stays bounded whatever the caller varies (issue 36), on real PostgreSQL.

Runs of alike answers were counted, but a run ended at any other event, so a
caller alternating two addresses (or purposes, or idempotency keys) made
every call a new run and wrote one event per call: 1,000 reset creates wrote
1,004 events. The ceiling (``domain.counting.FLOOD_EVENTS_PER_WINDOW``)
holds the events a stream gets from refusals, key bindings and rejected
presentations in an hour of the clock, whatever the parameters; every call
past it is counted, and no call is lost.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, text

from domain.counting import CLOSING_COUNTS, FLOOD_EVENTS_PER_WINDOW, RequestsCounted, flood_window
from domain.errors import CodeRejected
from domain.otp import RequestOtp
from domain.otp_events import OtpChallengeIssued, OtpChallengeSuperseded, otp_stream
from domain.reset import RequestReset
from domain.reset_events import ResetRequested, ResetSuperseded, reset_stream
from domain.reset_state import fold_reset
from domain.stream_growth import otp_events_per_hour_at_most, reset_events_per_hour_at_most
from infra.clock import ManualClock
from infra.errors import RateLimited
from infra.projector.rebuild import rebuild
from infra.projector.registry import projection_named
from infra.projector.verify import verify
from infra.services.closed_counts import write_all_closed_counts
from infra.services.otp import request_otp, verify_code
from infra.services.reset import consume_token, request_reset
from infra.services.unit_of_work import ServiceContext, load_state
from tests.support.log_reading import stream_events
from tests.support.replay import assert_projections_match_log
from tests.support.secrets import reset_token_of

ADDRESSES = ("ada@example.test", "eve@example.test")
CALLS = 1_000
TEN = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


def set_clock(clock: ManualClock, moment: datetime) -> None:
    clock.advance(moment - clock.now())


def calls_accounted(events: list[object]) -> int:
    """The calls a stream's events from floods answer for: one per event, ``count`` per count."""
    return sum(e.count if isinstance(e, RequestsCounted) else 1 for e in events if flood_window(e) is not None)


def assert_bounded_per_window(events: list[object]) -> None:
    """In every window: at most the ceiling of events from floods written one by one, and with their counts
    at most the ceiling and the counts a window writes once it has closed."""
    one_by_one = Counter(flood_window(e) for e in events
                         if flood_window(e) is not None and not isinstance(e, RequestsCounted))
    with_counts = Counter(w for e in events if (w := flood_window(e)) is not None)
    assert one_by_one and max(one_by_one.values()) <= FLOOD_EVENTS_PER_WINDOW, one_by_one
    assert max(with_counts.values()) <= FLOOD_EVENTS_PER_WINDOW + CLOSING_COUNTS, with_counts


def test_a_thousand_reset_creates_alternating_two_addresses_write_no_more_than_the_ceiling(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    set_clock(clock, TEN)
    answers: Counter[str] = Counter()
    for n in range(CALLS):
        try:
            outcome = request_reset(ctx, RequestReset("victim", ADDRESSES[n % 2], idempotency_key=f"k-{n}"))
            answers["reused" if outcome.reused else "made"] += 1
        except RateLimited:
            answers["refused"] += 1
    during = stream_events(engine, reset_stream("victim"))
    flood = [e for e in during if flood_window(e) is not None and not isinstance(e, RequestsCounted)]
    made = [e for e in during if isinstance(e, ResetRequested)]
    # Before the ceiling: 1,004 events, one per call past the five requests the hour allows.
    assert len(made) == ctx.reset_policy.hourly_limit == answers["made"]
    assert len(flood) <= FLOOD_EVENTS_PER_WINDOW
    assert len(during) <= FLOOD_EVENTS_PER_WINDOW + 2 * ctx.reset_policy.hourly_limit

    set_clock(clock, TEN + timedelta(hours=1, seconds=30))
    assert write_all_closed_counts(ctx) <= CLOSING_COUNTS
    events = stream_events(engine, reset_stream("victim"))
    assert calls_accounted(events) == answers["refused"] + answers["reused"] == CALLS - len(made)
    assert len(events) - len(during) <= CLOSING_COUNTS
    assert len(events) <= reset_events_per_hour_at_most(ctx.reset_policy)
    assert sum(isinstance(e, ResetSuperseded) for e in events) == len(made) - 1
    assert_bounded_per_window(events)
    assert_projections_match_log(engine)


def test_otp_creates_varying_address_purpose_and_key_and_wrong_codes_stay_under_the_ceiling_hour_after_hour(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    set_clock(clock, TEN + timedelta(minutes=20))
    purposes = ("login", "mfa", "step_up")
    flood_calls = 0
    issued: list[str] = []
    for n in range(CALLS):
        if n and n % 100 == 0:  # across two windows, 10:20 to 11:50: the ceiling is per hour of the clock
            clock.advance(timedelta(minutes=10))
        if n % 7 == 3 and issued:  # a wrong code for an early challenge: superseded, so a rejected presentation
            with pytest.raises(CodeRejected):
                verify_code(ctx, issued[0], "000000", user_id="victim")
            flood_calls += 1
            continue
        try:
            outcome = request_otp(ctx, RequestOtp("victim", ADDRESSES[n % 2], purpose=purposes[n % 3],
                                                  idempotency_key=f"k-{n}"))
            if outcome.reused:
                flood_calls += 1
            else:
                issued.append(str(outcome.request_id))
        except RateLimited:
            flood_calls += 1

    set_clock(clock, TEN + timedelta(hours=2, seconds=30))
    write_all_closed_counts(ctx)
    events = stream_events(engine, otp_stream("victim"))
    windows = {e.issued_at.hour for e in events if isinstance(e, OtpChallengeIssued)}
    assert windows == {10, 11}, "the flood spans two windows"
    assert len(issued) == 2 * ctx.otp_policy.hourly_limit
    assert calls_accounted(events) == flood_calls
    assert_bounded_per_window(events)
    accepted = sum(isinstance(e, (OtpChallengeIssued, OtpChallengeSuperseded)) for e in events)
    # Before the ceiling these calls wrote 157 events, 63 of them counts (in one hour instead of two: 579 and
    # 277); now 85.
    assert len(events) <= 2 * (FLOOD_EVENTS_PER_WINDOW + CLOSING_COUNTS) + accepted
    assert len(events) <= 2 * otp_events_per_hour_at_most(ctx.otp_policy)
    assert_projections_match_log(engine)


def flood_resets(ctx: ServiceContext, user: str, calls: int, first: int = 0) -> Counter[str]:
    """Reset creates alternating two addresses, a new idempotency key each: how each was answered."""
    answers: Counter[str] = Counter()
    for n in range(first, first + calls):
        try:
            outcome = request_reset(ctx, RequestReset(user, ADDRESSES[n % 2], idempotency_key=f"k-{n}",
                                                      client="app"))
            answers["reused" if outcome.reused else "made"] += 1
        except RateLimited:
            answers["refused"] += 1
    return answers


def test_past_the_ceiling_a_used_link_is_written_alone_and_the_hours_counts_wait_for_its_end(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    set_clock(clock, TEN)
    flood_resets(ctx, "victim", 200)
    before = stream_events(engine, reset_stream("victim"))
    newest = [e for e in before if isinstance(e, ResetRequested)][-1]

    consume_token(ctx, reset_token_of(engine, ctx.keys, newest.request_id))
    flood_resets(ctx, "victim", 50, first=200)

    after = stream_events(engine, reset_stream("victim"))[len(before):]
    assert [type(e).__name__ for e in after] == ["ResetCompleted"], "no count drawn in by the used link"
    set_clock(clock, TEN + timedelta(hours=1, seconds=1))
    assert write_all_closed_counts(ctx) <= CLOSING_COUNTS
    events = stream_events(engine, reset_stream("victim"))
    assert all(isinstance(e, RequestsCounted) for e in events[len(before) + 1:])
    assert_bounded_per_window(events)
    assert_projections_match_log(engine)


def test_threads_flooding_one_user_at_once_stay_under_the_ceiling_and_lose_no_call(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    # The tally is folded under the stream's lock: racing calls are decided one after the other on it.
    set_clock(clock, TEN)
    with ThreadPoolExecutor(8) as pool:
        answers = sum(pool.map(lambda n: flood_resets(ctx, "victim", 25, first=25 * n), range(8)), Counter())
    set_clock(clock, TEN + timedelta(hours=1, seconds=1))
    write_all_closed_counts(ctx)
    events = stream_events(engine, reset_stream("victim"))
    assert answers["made"] == ctx.reset_policy.hourly_limit
    assert calls_accounted(events) == answers["refused"] + answers["reused"] == 200 - answers["made"]
    assert_bounded_per_window(events)
    assert_projections_match_log(engine)


def test_a_snapshot_written_before_the_ceiling_reads_as_no_flood_yet_and_a_rebuild_gives_it_its_tally(
    ctx: ServiceContext, engine: Engine, admin_engine: Engine, clock: ManualClock
) -> None:
    set_clock(clock, TEN)
    flood_resets(ctx, "victim", 12)
    with admin_engine.begin() as connection:  # as the release before the ceiling wrote it
        connection.execute(text("UPDATE stream_snapshots SET state = state - 'flood'"))
    assert load_state(ctx, reset_stream("victim"), fold_reset).flood is None
    assert not verify(admin_engine, projection_named("stream_snapshots")).ok

    flood_resets(ctx, "victim", 3, first=12)  # decided on it: the hour's ceiling starts from none
    rebuild(admin_engine, projection_named("stream_snapshots"))
    assert verify(admin_engine, projection_named("stream_snapshots")).ok
    tally = load_state(ctx, reset_stream("victim"), fold_reset).flood
    assert tally is not None and tally.window_start == TEN and tally.written > 3
