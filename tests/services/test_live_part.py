"""A user kept at the hourly limit for days costs what a new one does (issue 13), on real PostgreSQL.

A snapshot holds its stream's live part (the open requests, and when the
last two hours' requests were made), every request has a row of its own, and
a decision reads a closed request by the key its call carries. Through the
services: the snapshot stays small whatever the history, and what the
service answers about an old link, code or key is what the whole fold says.
"""

from __future__ import annotations

import json
from datetime import timedelta

import attrs
import pytest
from sqlalchemy import Engine, text

from domain.decisions import RequestOutcome
from domain.errors import CodeRejected, IdempotencyMismatch, TokenInvalid
from domain.otp import RequestOtp
from domain.otp_events import otp_stream
from domain.reset import RequestReset
from domain.reset_events import ResetTokenRejected, reset_stream
from domain.reset_state import fold_reset
from infra.clock import ManualClock
from infra.errors import RateLimited
from infra.eventlog.postgres import PostgresEventStore
from infra.projector.registry import projection_named
from infra.projector.snapshots import encode_state
from infra.projector.verify import verify
from infra.services.otp import request_otp, verify_code
from infra.services.reset import consume_token, request_reset
from infra.services.unit_of_work import ServiceContext
from projections.snapshots import LIVE_FOR, Snapshot
from tests.support.log_reading import stream_events
from tests.support.replay import assert_projections_match_log
from tests.support.secrets import otp_code_of, reset_token_of

ADA, EVE = "ada@example.test", "eve@example.test"


def hours_at_the_limit(ctx: ServiceContext, clock: ManualClock, user: str, hours: int) -> list[RequestOutcome]:
    """The hourly limit's reset requests every hour for ``hours``, each with a key of its own."""
    made = []
    for hour in range(hours):
        for n in range(ctx.reset_policy.hourly_limit):
            made.append(request_reset(ctx, RequestReset(user, ADA, idempotency_key=f"h{hour}-{n}")))
            clock.advance(ctx.reset_policy.cooldown + timedelta(seconds=1))
        clock.advance(timedelta(hours=1) - ctx.reset_policy.hourly_limit * (ctx.reset_policy.cooldown
                                                                            + timedelta(seconds=1)))
    return made


def snapshot_state(engine: Engine, stream_id: str) -> dict:
    with engine.connect() as connection:
        return connection.execute(text("SELECT state FROM stream_snapshots WHERE stream_id = :s"),
                                  {"s": stream_id}).scalar_one()


def snapshot_requests(engine: Engine, stream_id: str) -> int:
    return len(snapshot_state(engine, stream_id)["requests"])


def request_rows(engine: Engine, stream_id: str) -> int:
    with engine.connect() as connection:
        return connection.execute(text("SELECT count(*) FROM stream_requests WHERE stream_id = :s"),
                                  {"s": stream_id}).scalar_one()


def test_two_days_at_the_limit_leave_the_open_request_and_two_hours_of_times_in_the_snapshot_and_a_row_for_each(
    ctx: ServiceContext, clock: ManualClock, engine: Engine, admin_engine: Engine
) -> None:
    made = hours_at_the_limit(ctx, clock, "7", 48)

    live_hours = LIVE_FOR // timedelta(hours=1)
    assert len(made) == 48 * ctx.reset_policy.hourly_limit
    assert snapshot_requests(engine, reset_stream("7")) == 1
    assert len(snapshot_state(engine, reset_stream("7"))["request_times"]) <= \
        (live_hours + 1) * ctx.reset_policy.hourly_limit
    assert request_rows(engine, reset_stream("7")) == len(made)
    report = verify(admin_engine, projection_named("stream_snapshots"))
    assert report.ok, report.summary()
    assert_projections_match_log(engine)


def test_a_link_used_or_replaced_two_days_ago_is_answered_so_and_the_presentation_recorded(
    ctx: ServiceContext, clock: ManualClock, engine: Engine
) -> None:
    first = request_reset(ctx, RequestReset("8", ADA))
    used = reset_token_of(engine, ctx.keys, first.request_id)
    consume_token(ctx, used)
    clock.advance(ctx.reset_policy.cooldown + timedelta(seconds=1))
    replaced = reset_token_of(engine, ctx.keys, request_reset(ctx, RequestReset("8", ADA)).request_id)
    clock.advance(timedelta(hours=1))
    hours_at_the_limit(ctx, clock, "8", 48)

    with pytest.raises(TokenInvalid, match="already used"):
        consume_token(ctx, used)
    with pytest.raises(TokenInvalid, match="replaced by a newer one"):
        consume_token(ctx, replaced)
    rejected = [e for e in stream_events(engine, reset_stream("8")) if isinstance(e, ResetTokenRejected)]
    assert [e.reason for e in rejected] == ["used", "superseded"]
    assert_projections_match_log(engine)


def test_a_key_from_twenty_hours_ago_replays_its_first_answer_and_refuses_another_address(
    ctx: ServiceContext, clock: ManualClock, engine: Engine
) -> None:
    made = hours_at_the_limit(ctx, clock, "9", 24)
    first_of_hour_four = made[4 * ctx.reset_policy.hourly_limit]

    again = request_reset(ctx, RequestReset("9", ADA, idempotency_key="h4-0"))
    assert again.request_id == first_of_hour_four.request_id and again.replayed
    with pytest.raises(IdempotencyMismatch):
        request_reset(ctx, RequestReset("9", EVE, idempotency_key="h4-0"))
    assert request_rows(engine, reset_stream("9")) == len(made), "a replay writes nothing"


def test_a_code_used_a_day_ago_is_refused_as_used(
    ctx: ServiceContext, clock: ManualClock, engine: Engine
) -> None:
    challenge = request_otp(ctx, RequestOtp("10", ADA))
    code = otp_code_of(engine, ctx.keys, challenge.request_id)
    verify_code(ctx, challenge.request_id, code, user_id="10")
    for _ in range(24):
        clock.advance(timedelta(hours=1))
        for n in range(ctx.otp_policy.hourly_limit):
            request_otp(ctx, RequestOtp("10", ADA, idempotency_key=f"k{clock.now().isoformat()}-{n}"))
            clock.advance(ctx.otp_policy.cooldown + timedelta(seconds=1))

    with pytest.raises(CodeRejected, match="already used"):
        verify_code(ctx, challenge.request_id, code, user_id="10")
    assert snapshot_requests(engine, otp_stream("10")) == 1


def test_a_snapshot_from_before_the_live_part_answers_from_itself_and_writes_its_rows_on_its_next_decision(
    ctx: ServiceContext, clock: ManualClock, engine: Engine, admin_engine: Engine
) -> None:
    first = request_reset(ctx, RequestReset("11", ADA))
    replaced = reset_token_of(engine, ctx.keys, first.request_id)
    clock.advance(timedelta(hours=1))
    hours_at_the_limit(ctx, clock, "11", 4)
    with admin_engine.begin() as connection:  # as schema 4 left it: every request in the snapshot, no rows
        history = PostgresEventStore(connection).load(reset_stream("11"))
        whole = fold_reset(r.event for r in history)
        recipient_at = {r.event.request_id: r.global_position for r in history if hasattr(r.event, "nonce")}
        state = encode_state(Snapshot(reset_stream("11"), history[-1].stream_version, whole, recipient_at))
        del state["live"], state["request_times"]
        connection.execute(text("UPDATE stream_snapshots SET state = CAST(:state AS jsonb)"),
                           {"state": json.dumps(state)})
        connection.execute(text("DELETE FROM stream_requests"))

    with pytest.raises(TokenInvalid, match="replaced by a newer one"):
        consume_token(ctx, replaced)  # the old snapshot holds it; recording the refusal writes every row

    assert request_rows(engine, reset_stream("11")) == len(whole.requests)
    assert snapshot_requests(engine, reset_stream("11")) == 1
    report = verify(admin_engine, projection_named("stream_snapshots"))
    assert report.ok, report.summary()


def test_a_snapshot_that_kept_closed_requests_counts_them_and_keeps_their_times_alone_on_its_next_decision(
    ctx: ServiceContext, clock: ManualClock, engine: Engine, admin_engine: Engine
) -> None:
    for _ in range(ctx.reset_policy.hourly_limit):  # the hour's limit: the next request within it is refused
        request_reset(ctx, RequestReset("12", ADA))
        clock.advance(ctx.reset_policy.cooldown + timedelta(seconds=1))
    with admin_engine.begin() as connection:  # as schema 5 first wrote it: closed requests kept, no times
        history = PostgresEventStore(connection).load(reset_stream("12"))
        whole = fold_reset(r.event for r in history)
        recipient_at = {r.event.request_id: r.global_position for r in history if hasattr(r.event, "nonce")}
        state = encode_state(Snapshot(reset_stream("12"), history[-1].stream_version, attrs.evolve(
            whole, receipts={}), recipient_at))
        del state["request_times"]
        connection.execute(text("UPDATE stream_snapshots SET state = CAST(:state AS jsonb)"),
                           {"state": json.dumps(state)})
    assert snapshot_requests(engine, reset_stream("12")) == ctx.reset_policy.hourly_limit
    assert not verify(admin_engine, projection_named("stream_snapshots")).ok  # the uncut snapshot is reported

    with pytest.raises(RateLimited):
        request_reset(ctx, RequestReset("12", EVE))
    clock.advance(timedelta(hours=1))
    request_reset(ctx, RequestReset("12", EVE))

    assert snapshot_requests(engine, reset_stream("12")) == 1
    assert len(snapshot_state(engine, reset_stream("12"))["request_times"]) == ctx.reset_policy.hourly_limit + 1
    report = verify(admin_engine, projection_named("stream_snapshots"))
    assert report.ok, report.summary()
