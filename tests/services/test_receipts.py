"""Idempotency receipts of both flows on real PostgreSQL: replays, mismatches,
lifetimes, keys in flight, and the ``receipts`` projection."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from attrs import evolve
from sqlalchemy import Engine, text

from domain.decisions import RequestOutcome
from domain.request_rules import IdempotencyKeyBound
from domain.errors import IdempotencyMismatch
from infra.errors import RateLimited, RequestInFlight
from domain.otp import RequestOtp
from domain.otp_events import otp_stream
from domain.reset import RequestReset
from domain.reset_events import ResetRequested, reset_stream
from infra.clock import ManualClock
from infra.services.otp import request_otp
from tests.support.receipts import find_receipt
from infra.services.reset import request_reset
from infra.services.locks import IdempotencyLock
from infra.services.unit_of_work import ServiceContext
from infra.delivery.worker import Worker
from tests.support.log_reading import stream_events
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log
from tests.support.waiting import lock_waiters, wait_until

ADA = "ada@example.test"


def event_count(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(text("SELECT count(*) FROM events")).scalar_one()


def sent(ctx: ServiceContext) -> dict[str, int]:
    return Worker(ctx, RecordingMailer(), sender="authledger <no-reply@app.test>").drain()


def test_a_replayed_reset_key_returns_the_first_request_even_after_a_newer_one(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    first = request_reset(ctx, RequestReset("42", ADA, idempotency_key="r-1", client="app"))
    clock.advance(timedelta(minutes=5))
    newer = request_reset(ctx, RequestReset("42", ADA, client="app"))
    clock.advance(timedelta(minutes=5))

    replay = request_reset(ctx, RequestReset("42", ADA, idempotency_key="r-1", client="app"))

    assert newer.request_id != first.request_id
    assert replay == evolve(first, replayed=True), "the first answer, marked only as a replay"
    receipt = find_receipt(engine, flow="reset", client="app", user_id="42", idempotency_key="r-1")
    assert receipt is not None
    assert (receipt.request_id, receipt.message_id) == (first.request_id, first.message_id)
    assert sent(ctx) == {"sent": 1, "skipped": 1}, "the replay queued nothing"
    assert_projections_match_log(engine)


def test_a_reset_key_with_another_address_is_a_mismatch_and_writes_nothing(
    ctx: ServiceContext, engine: Engine
) -> None:
    request_reset(ctx, RequestReset("42", ADA, idempotency_key="r-1", client="app"))
    before = event_count(engine)
    with pytest.raises(IdempotencyMismatch):
        request_reset(ctx, RequestReset("42", "eve@example.test", idempotency_key="r-1", client="app"))
    assert event_count(engine) == before


@pytest.mark.parametrize("flow", ["reset", "otp"])
def test_a_key_answered_within_the_cooldown_still_replays_after_it(
    ctx: ServiceContext, engine: Engine, clock: ManualClock, flow: str
) -> None:
    """The gap this closes: the key is bound to the reused request, so a retry
    after the cooldown does not make (and mail) a second one."""
    request = request_reset if flow == "reset" else request_otp
    command = RequestReset if flow == "reset" else RequestOtp
    stream = reset_stream("42") if flow == "reset" else otp_stream("42")
    opened = request(ctx, command("42", ADA))  # type: ignore[operator]
    clock.advance(timedelta(seconds=10))
    reused = request(ctx, command("42", ADA, idempotency_key="k-1", client="app"))  # type: ignore[operator]
    bound_at = clock.now()
    clock.advance(timedelta(minutes=5))  # well past the cooldown

    replay = request(ctx, command("42", ADA, idempotency_key="k-1", client="app"))  # type: ignore[operator]

    assert reused.reused and reused.request_id == opened.request_id
    assert replay == evolve(reused, replayed=True), "the first answer (reused), marked only as a replay"
    [bound] = [e for e in stream_events(engine, stream) if isinstance(e, IdempotencyKeyBound)]
    assert (bound.flow, bound.request_id, bound.idempotency_key) == (flow, opened.request_id, "k-1")
    receipt = find_receipt(engine, flow=flow, client="app", user_id="42", idempotency_key="k-1")
    assert receipt is not None and receipt.request_id == opened.request_id and receipt.created_at == bound_at
    assert sent(ctx) == {"sent": 1}
    assert_projections_match_log(engine)


def test_a_key_refused_by_the_hourly_limit_makes_a_request_once_the_limit_allows(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    for _ in range(ctx.otp_policy.hourly_limit):
        request_otp(ctx, RequestOtp("42", ADA))
        clock.advance(timedelta(minutes=2))
    with pytest.raises(RateLimited) as refused:
        request_otp(ctx, RequestOtp("42", ADA, idempotency_key="k-1"))
    assert find_receipt(engine, flow="otp", client=None, user_id="42", idempotency_key="k-1") is None

    clock.advance(refused.value.retry_at - clock.now())
    retried = request_otp(ctx, RequestOtp("42", ADA, idempotency_key="k-1"))

    assert not retried.reused
    receipt = find_receipt(engine, flow="otp", client=None, user_id="42", idempotency_key="k-1")
    assert receipt is not None and receipt.request_id == retried.request_id
    assert_projections_match_log(engine)


def test_keys_are_scoped_per_client_user_and_flow(ctx: ServiceContext, engine: Engine, clock: ManualClock) -> None:
    first = request_otp(ctx, RequestOtp("42", ADA, idempotency_key="k", client="web"))
    clock.advance(timedelta(minutes=2))
    other_client = request_otp(ctx, RequestOtp("42", ADA, idempotency_key="k", client="mobile"))
    other_user = request_otp(ctx, RequestOtp("43", "bo@example.test", idempotency_key="k", client="web"))
    other_flow = request_reset(ctx, RequestReset("42", ADA, idempotency_key="k", client="web"))

    ids = {first.request_id, other_client.request_id, other_user.request_id, other_flow.request_id}
    assert len(ids) == 4
    for flow, client, user_id, outcome in [
        ("otp", "web", "42", first), ("otp", "mobile", "42", other_client),
        ("otp", "web", "43", other_user), ("reset", "web", "42", other_flow),
    ]:  # fmt: skip
        receipt = find_receipt(engine, flow=flow, client=client, user_id=user_id, idempotency_key="k")
        assert receipt is not None and receipt.request_id == outcome.request_id
    assert_projections_match_log(engine)


def test_a_key_is_kept_for_a_day_and_then_makes_a_new_request(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    first = request_reset(ctx, RequestReset("42", ADA, idempotency_key="r-1"))
    clock.advance(ctx.reset_policy.receipt_ttl - timedelta(seconds=1))
    assert request_reset(ctx, RequestReset("42", ADA, idempotency_key="r-1")).request_id == first.request_id
    clock.advance(timedelta(seconds=1))

    later = request_reset(ctx, RequestReset("42", "new@example.test", idempotency_key="r-1"))

    assert later.request_id != first.request_id and not later.reused
    receipt = find_receipt(engine, flow="reset", client=None, user_id="42", idempotency_key="r-1")
    assert receipt is not None and receipt.request_id == later.request_id
    requested = [e for e in stream_events(engine, reset_stream("42")) if isinstance(e, ResetRequested)]
    assert len(requested) == 2
    assert_projections_match_log(engine)


def hold_key(engine: Engine, lock: IdempotencyLock, release: threading.Event, held: threading.Event) -> None:
    """Hold an idempotency key in an open transaction, as a first request still running would."""
    with engine.begin() as connection:
        lock.take(connection)
        held.set()
        release.wait(timeout=30)


@pytest.mark.parametrize("flow", ["reset", "otp"])
def test_a_key_in_flight_is_refused_when_asked_and_nothing_is_written(
    ctx: ServiceContext, engine: Engine, flow: str
) -> None:
    release, held = threading.Event(), threading.Event()
    holder = threading.Thread(
        target=hold_key, args=(engine, IdempotencyLock(flow, "app", "42", "k-1"), release, held)
    )
    holder.start()
    try:
        assert held.wait(timeout=10)
        with pytest.raises(RequestInFlight):
            if flow == "reset":
                request_reset(ctx, RequestReset("42", ADA, idempotency_key="k-1", client="app"), in_flight="refuse")
            else:
                request_otp(ctx, RequestOtp("42", ADA, idempotency_key="k-1", client="app"), in_flight="refuse")
        assert event_count(engine) == 0
        # Another key of the same user is not in flight.
        request_otp(ctx, RequestOtp("42", ADA, idempotency_key="k-2", client="app"), in_flight="refuse")
    finally:
        release.set()
        holder.join()
    answer = request_otp(ctx, RequestOtp("42", ADA, idempotency_key="k-1", client="app"), in_flight="refuse")
    assert isinstance(answer, RequestOutcome)


def test_a_waiting_request_answers_once_the_key_is_released(ctx: ServiceContext, engine: Engine) -> None:
    release, held = threading.Event(), threading.Event()
    holder = threading.Thread(
        target=hold_key, args=(engine, IdempotencyLock("otp", "app", "42", "k-1"), release, held)
    )
    holder.start()
    assert held.wait(timeout=10)
    answers: list[RequestOutcome] = []
    waiter = threading.Thread(
        target=lambda: answers.append(request_otp(ctx, RequestOtp("42", ADA, idempotency_key="k-1", client="app")))
    )
    waiter.start()
    wait_until(lambda: lock_waiters(engine), what="the second request to queue behind the key")
    assert answers == [] and waiter.is_alive(), "it waits for the key"
    release.set()
    holder.join()
    waiter.join(timeout=10)
    assert len(answers) == 1 and not answers[0].reused


def test_an_unknown_in_flight_mode_is_a_programming_error(ctx: ServiceContext) -> None:
    with pytest.raises(ValueError, match="in_flight"):
        request_otp(ctx, RequestOtp("42", ADA), in_flight="later")  # type: ignore[arg-type]
