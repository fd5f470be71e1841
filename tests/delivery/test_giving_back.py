"""Messages claimed but not sent are given back: by a worker stopping, or while its provider is down."""

from __future__ import annotations

import threading

from sqlalchemy import Engine, text

from domain.circuit import CircuitPolicy
from domain.email import LeaseClaimed, LeaseReleased
from domain.outage import ProviderOutageBegan, provider_stream
from domain.reset import RequestReset
from infra.delivery.leases import Claim
from infra.delivery.providers import RetryableSendError
from infra.delivery.worker import Worker
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.support.log_reading import stream_events
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log
from tests.support.traffic import SENDER


def queue(ctx: ServiceContext, count: int) -> list[str]:
    return [str(request_reset(ctx, RequestReset(f"user-{n}", f"u{n}@example.test")).message_id) for n in range(count)]


def attempts(engine: Engine) -> dict[str, int]:
    with engine.connect() as connection:
        return dict(connection.execute(text("SELECT message_id::text, attempt_count FROM email_outbox")).all())


class StopsRightAfterClaiming(Worker):
    def claim(self, owner: str, limit: int) -> list[Claim]:
        claims = super().claim(owner, limit)
        self.stop()
        return claims


def test_a_worker_stopped_between_claim_and_send_gives_the_claimed_messages_back_unsent(
    ctx: ServiceContext, engine: Engine
) -> None:
    messages = queue(ctx, 3)
    mailer = RecordingMailer()
    worker = StopsRightAfterClaiming(ctx, mailer, sender=SENDER, inflight=8, poll_seconds=0.1)
    running = threading.Thread(target=worker.run)
    running.start()
    running.join(timeout=15)

    assert not running.is_alive()
    assert mailer.emails == []
    for message in messages:
        trail = stream_events(engine, f"email:{message}")
        assert [type(e) for e in trail[1:]] == [LeaseClaimed, LeaseReleased]
        assert trail[-1].attempt_returned is False
    assert worker.delivered == {"pending": 3}
    assert_projections_match_log(engine)


class ProviderDownAsItClaims(Worker):
    """The provider is found down while this worker's claim is on its way back from the database."""

    def claim(self, owner: str, limit: int) -> list[Claim]:
        claims = super().claim(owner, limit)
        down = RetryableSendError("http connect failed: refused")
        down.provider_down = True  # type: ignore[attr-defined]
        for claim in claims[:1]:
            self.breaker.observe(claim.row.message_id, down)
        return claims


def test_messages_claimed_as_the_provider_went_down_are_given_back_without_counting_an_attempt(
    ctx: ServiceContext, engine: Engine
) -> None:
    messages = queue(ctx, 3)
    mailer = RecordingMailer()
    worker = ProviderDownAsItClaims(ctx, mailer, sender=SENDER, circuit=CircuitPolicy(failures_to_open=1))

    # The test's clock stands still: no probe falls due, so the drain ends with the circuit open.
    assert worker.drain() == {"pending": 3}

    assert worker.circuit_state == "open"
    assert mailer.emails == []
    assert attempts(engine) == dict.fromkeys(messages, 0)
    for message in messages:
        released = stream_events(engine, f"email:{message}")[-1]
        assert isinstance(released, LeaseReleased) and released.attempt_returned
    [began] = stream_events(engine, provider_stream("recording"))
    assert isinstance(began, ProviderOutageBegan)
    assert (began.worker, began.failures, began.last_error) == (worker.owner, 1, "http connect failed: refused")
    assert_projections_match_log(engine)
