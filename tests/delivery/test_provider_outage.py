"""A provider-wide outage during a burst: recognised, ridden out without burning attempts, recovered from."""

from __future__ import annotations

import threading
import time

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

pytestmark = pytest.mark.slow

OUTAGE_SECONDS = 15


def test_an_outage_during_a_burst_loses_nothing_burns_no_attempts_and_ends_within_seconds_of_recovery(
    ctx: ServiceContext, engine: Engine
) -> None:
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
            time.sleep(OUTAGE_SECONDS)
            assert worker.circuit_state in ("open", "half_open")
            assert provider.sends_by_key == {}
            provider.up()
            recovered = time.monotonic()
            while len(provider.sends_by_key) < 100 and time.monotonic() - recovered < 30:
                time.sleep(0.05)
            caught_up = time.monotonic() - recovered
        finally:
            worker.stop()
            running.join(timeout=30)
        requests_while_down = sum(1 for r in provider.requests if r.status == 503)

    assert provider.sends_by_key == dict.fromkeys(messages, 1), "nothing lost, nothing sent twice"
    assert caught_up < 10
    began, ended = stream_events(engine, provider_stream("http"))
    assert isinstance(began, ProviderOutageBegan) and isinstance(ended, ProviderOutageEnded)
    assert began.worker == ended.worker == worker.owner and ended.began_at == began.began_at
    assert requests_while_down < 32 + 10, "once open, the worker only probes"
    with engine.connect() as connection:
        attempts = connection.execute(text("SELECT max(attempt_count) FROM email_outbox")).scalar_one()
        states = dict(connection.execute(text("SELECT state, count(*) FROM email_outbox GROUP BY 1")).all())
    print(f"\n{requests_while_down} requests during a {OUTAGE_SECONDS} s outage; "
          f"all 100 sent {caught_up:.1f} s after recovery; most attempts of one message: {attempts}")
    assert states == {"sent": 100}
    assert attempts <= 4, "attempts are not burned while the circuit is open"
    assert_projections_match_log(engine)
