"""One worker process, many sends in flight: against a real HTTP provider on loopback answering after 100 ms."""

from __future__ import annotations

import json
import subprocess
import threading
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
from tests.support.chaos import AUTHLEDGER, KEYS_ENV, queue_messages
from tests.support.cli import process_env
from tests.support.http_provider import FakeHttpProvider
from tests.support.log_reading import stream_events
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log
from tests.support.traffic import SENDER, no_cooldown
from tests.support.waiting import wait_until


@pytest.fixture
def provider() -> Iterator[FakeHttpProvider]:
    with FakeHttpProvider() as provider:
        provider.delay(0.1)
        yield provider


def queue(ctx: ServiceContext, count: int) -> list[str]:
    return [str(request_reset(ctx, RequestReset(f"user-{n}", f"u{n}@example.test")).message_id) for n in range(count)]


def deliver_in_a_worker_process(
    env: dict[str, str | None], engine: Engine, provider: FakeHttpProvider, messages: int, inflight: int
) -> dict[str, object]:
    """``authledger worker --once`` in a process of its own, as in production: the provider's threads do
    not compete with it for one interpreter. Its closing log line."""
    queue_messages(engine, messages)
    env = {**env, "AUTHLEDGER_TOKEN_KEYS": KEYS_ENV,  # the keys queue_messages requested with
           "AUTHLEDGER_PROVIDER": "http", "AUTHLEDGER_HTTP_PROVIDER_URL": provider.url}
    worker = subprocess.run([AUTHLEDGER, "worker", "--once", "--inflight", str(inflight), "--json"],
                            env=process_env(env), capture_output=True, text=True, timeout=60)
    assert worker.returncode == 0, worker.stderr
    assert json.loads(worker.stdout) == {"sent": messages}
    assert len(provider.sends_by_key) == messages and set(provider.sends_by_key.values()) == {1}
    assert set(provider.requests_by_key.values()) == {1}, "each message sent once, not even a replay"
    [drained] = [line for line in map(json.loads, worker.stderr.splitlines()) if line["event"] == "worker drained"]
    return drained


@pytest.mark.slow
def test_a_worker_process_sends_200_messages_to_a_100_ms_provider_once_each_a_window_at_a_time(
    env: dict[str, str | None], engine: Engine, provider: FakeHttpProvider
) -> None:
    # How many emails a second that makes is bench/delivery.py's to measure; here, what makes it fast:
    # the provider answers nothing until a whole window waits on it.
    provider.hold_answers_until(32)
    drained = deliver_in_a_worker_process(env, engine, provider, 200, inflight=32)

    assert provider.peak_in_flight == 32, "a whole window in flight at once, never more"
    # The worker's own rule (infra/delivery/pipeline.py): a read older than 100 ms is redone, never sent on.
    assert drained["stalest_read_ms"] <= 100, "no send relies on a read older than 100 ms"
    assert_projections_match_log(engine)


@pytest.mark.slow
def test_a_window_of_32_has_32_requests_in_flight_at_the_provider_at_once(
    env: dict[str, str | None], engine: Engine, provider: FakeHttpProvider
) -> None:
    # 300 ms: long enough for the window to fill while each group is read
    # fresh, even on a loaded machine where a fresh read costs milliseconds
    # per message.
    provider.delay(0.3)
    deliver_in_a_worker_process(env, engine, provider, 100, inflight=32)

    assert provider.peak_in_flight >= 32
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
    with HttpMailer(provider.url, window=16) as mailer:
        worker = Worker(attrs.evolve(ctx, clock=SystemClock()), mailer, sender=SENDER, inflight=16, poll_seconds=0.2)
        running = threading.Thread(target=worker.run)
        running.start()
        try:
            wait_until(lambda: worker.in_flight == 16, what="16 sends in flight")
            assert worker.circuit_state == "closed"
        finally:
            worker.stop()
            running.join(timeout=15)
    assert worker.in_flight == 0
    assert worker.delivered.get("sent", 0) >= 16, "the sends in flight finished on stop"
