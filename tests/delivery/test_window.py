"""One worker, many sends in flight: against a real HTTP provider on loopback answering after 100 ms."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import attrs
import pytest
from sqlalchemy import Engine

from domain.email import DeliverySkipped, LeaseClaimed, ProviderAccepted
from domain.reset import RequestReset
from infra.clock import SystemClock
from infra.delivery.leases import Claim
from infra.delivery.providers.http import HttpMailer
from infra.delivery.worker import Worker
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.support.http_provider import FakeHttpProvider
from tests.support.log_reading import stream_events
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log
from tests.support.traffic import SENDER, no_cooldown


@pytest.fixture
def provider() -> Iterator[FakeHttpProvider]:
    with FakeHttpProvider() as provider:
        provider.delay(0.1)
        yield provider


def queue(ctx: ServiceContext, count: int) -> list[str]:
    return [str(request_reset(ctx, RequestReset(f"user-{n}", f"u{n}@example.test")).message_id) for n in range(count)]


def test_a_window_of_32_has_32_requests_in_flight_and_sends_each_message_once(
    ctx: ServiceContext, engine: Engine, provider: FakeHttpProvider
) -> None:
    messages = queue(ctx, 200)
    with HttpMailer(provider.url) as mailer:
        started = time.monotonic()
        tally = Worker(ctx, mailer, sender=SENDER, inflight=32).drain()
        took = time.monotonic() - started

    assert tally == {"sent": 200}
    assert provider.most_in_flight >= 32
    assert provider.sends_by_key == {message: 1 for message in messages}
    assert provider.requests_by_key == {message: 1 for message in messages}, "not even a replay"
    print(f"\n200 messages, 100 ms each, window 32: {took:.2f} s ({200 / took:.0f} emails/s)")
    assert took < 4, "far faster than one at a time (20 s)"
    assert_projections_match_log(engine)


class SupersededRightAfterClaiming(Worker):
    """Between this worker's claim and its send, the user asks again: the claimed link is superseded."""

    def claim(self, owner: str, limit: int) -> list[Claim]:
        claims = super().claim(owner, limit)
        if claims and not hasattr(self, "newer"):
            self.newer = request_reset(self.ctx, RequestReset("42", "ada@example.test"))
        return claims


def test_a_request_superseded_between_claim_and_send_is_skipped_never_sent(
    ctx: ServiceContext, engine: Engine
) -> None:
    ctx = no_cooldown(ctx)
    first = request_reset(ctx, RequestReset("42", "ada@example.test"))
    mailer = RecordingMailer()
    worker = SupersededRightAfterClaiming(ctx, mailer, sender=SENDER, inflight=8, batch=1)

    assert worker.drain() == {"skipped": 1, "sent": 1}

    skipped = stream_events(engine, f"email:{first.message_id}")
    assert [type(e) for e in skipped[1:]] == [LeaseClaimed, DeliverySkipped]
    assert skipped[-1].reason == "superseded"
    assert [e.message_id for e in mailer.emails] == [worker.newer.message_id]
    assert [type(e) for e in stream_events(engine, f"email:{worker.newer.message_id}")][-1] is ProviderAccepted
    assert_projections_match_log(engine)


def test_the_gauges_say_what_is_in_flight_and_whether_the_circuit_is_closed(
    ctx: ServiceContext, provider: FakeHttpProvider
) -> None:
    queue(ctx, 40)
    provider.delay(0.5)
    with HttpMailer(provider.url) as mailer:
        worker = Worker(attrs.evolve(ctx, clock=SystemClock()), mailer, sender=SENDER, inflight=16, poll_seconds=0.2)
        running = threading.Thread(target=worker.run)
        running.start()
        try:
            deadline = time.monotonic() + 10
            while worker.in_flight < 16 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert worker.in_flight == 16
            assert worker.circuit_state == "closed"
        finally:
            worker.stop()
            running.join(timeout=15)
    assert worker.in_flight == 0
    assert worker.delivered.get("sent", 0) >= 16, "the sends in flight finished on stop"

