"""A provider-wide outage during a burst: recognised, ridden out without burning attempts, recovered from."""

from __future__ import annotations

import threading

import attrs
import pytest
from sqlalchemy import Engine, text

from domain.outage import ProviderOutageBegan, ProviderOutageEnded, provider_stream
from domain.reset import RequestReset
from infra.clock import SystemClock
from infra.delivery.providers.http import HttpMailer
from infra.delivery.worker import Worker
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.support.http_provider import FakeHttpProvider
from tests.support.log_reading import stream_events
from tests.support.replay import assert_projections_match_log
from tests.support.traffic import SENDER
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


def refused(provider: FakeHttpProvider) -> int:
    return sum(1 for r in provider.requests if r.status == 503)


def test_an_outage_during_a_burst_loses_nothing_burns_no_attempts_and_only_probes_until_recovery(
    ctx: ServiceContext, engine: Engine
) -> None:
    # How soon after recovery the backlog is sent is bench/providers.py's to measure (its outage run);
    # here, what happened and in which order.
    ctx = attrs.evolve(ctx, clock=SystemClock())
    with FakeHttpProvider() as provider, HttpMailer(provider.url, window=32) as http:
        provider.delay(0.1)
        provider.down(503)
        messages = [str(request_reset(ctx, RequestReset(f"user-{n}", f"u{n}@example.test")).message_id)
                    for n in range(100)]
        worker = Worker(ctx, http, sender=SENDER, inflight=32, poll_seconds=0.5)
        running = threading.Thread(target=worker.run)
        running.start()
        try:
            wait_until(lambda: worker.circuit_state == "open", what="the circuit to open")
            when_opened = refused(provider)
            wait_until(lambda: refused(provider) >= when_opened + 2, what="two probes refused while open")
            assert worker.circuit_state in ("open", "half_open")
            assert provider.sends_by_key == {}
            provider.up()
            wait_until(lambda: len(provider.sends_by_key) == 100, what="all 100 sent after the recovery")
        finally:
            worker.stop()
            running.join(timeout=30)
        requests_while_down = refused(provider)

    assert provider.sends_by_key == dict.fromkeys(messages, 1), "nothing lost, nothing sent twice"
    began, ended = stream_events(engine, provider_stream("http"))
    assert isinstance(began, ProviderOutageBegan) and isinstance(ended, ProviderOutageEnded)
    assert began.worker == ended.worker == worker.owner and ended.began_at == began.began_at
    # The window that met the outage, then one probe at a time: not a window per poll.
    assert requests_while_down < 32 + 10, "once open, the worker only probes"
    with engine.connect() as connection:
        attempts = connection.execute(text("SELECT max(attempt_count) FROM email_outbox")).scalar_one()
        states = dict(connection.execute(text("SELECT state, count(*) FROM email_outbox GROUP BY 1")).all())
    assert states == {"sent": 100}
    assert attempts <= 4, "attempts are not burned while the circuit is open"
    assert_projections_match_log(engine)
