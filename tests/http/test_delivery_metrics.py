"""Delivery in /metrics: time from queued to accepted, and the running worker's window and circuit."""

from __future__ import annotations

import attrs
from attrs import define
from sqlalchemy import Engine

from domain.delivery import DeliveryPolicy
from domain.reset import RequestReset
from infra.clock import ManualClock
from infra.delivery.redrive import Selection, redrive
from infra.delivery.worker import Worker
from infra.http.metrics import LogMetrics, render
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.support.mailers import RecordingMailer

SENDER = "authledger <no-reply@app.test>"


@define
class RebuiltWorker:
    """The attributes a worker with a send window and a circuit breaker exposes to metrics."""

    owner: str
    in_flight: int
    circuit_state: str
    delivered: dict[str, int]


@define
class OldWorker:
    """A worker as it was before the send window and the circuit breaker."""

    owner: str
    delivered: dict[str, int]


def samples(exposition: str) -> dict[str, str]:
    return dict(line.rsplit(" ", 1) for line in exposition.splitlines() if not line.startswith("#"))


def started(engine: Engine) -> LogMetrics:
    metrics = LogMetrics()
    with engine.connect() as connection:
        metrics.start(connection)
    return metrics


def test_the_delivery_histogram_counts_an_accepted_message_by_its_time_from_queued(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    metrics = started(engine)
    request_reset(ctx, RequestReset("1", "ada@example.test"))
    clock.advance(3)  # the worker picks it up three seconds later
    assert Worker(ctx, RecordingMailer(), sender=SENDER).drain() == {"sent": 1}

    seen = samples(render(ctx, metrics))

    assert seen['authledger_delivery_latency_seconds_bucket{le="2.5"}'] == "0"
    assert seen['authledger_delivery_latency_seconds_bucket{le="5.0"}'] == "1"
    assert seen["authledger_delivery_latency_seconds_count"] == "1"
    assert float(seen["authledger_delivery_latency_seconds_sum"]) == 3.0


def test_a_redrive_is_counted(ctx: ServiceContext, engine: Engine) -> None:
    metrics = started(engine)
    capped = attrs.evolve(ctx, delivery_policy=DeliveryPolicy(max_attempts=1))
    message_id = request_reset(capped, RequestReset("1", "ada@example.test")).message_id
    mailer = RecordingMailer()
    mailer.fail_next = 1
    assert Worker(capped, mailer, sender=SENDER).drain() == {"abandoned": 1}
    redrive(capped, Selection(message_id=message_id), reason="outage over", metadata={"actor": "cli:alice"})

    seen = samples(render(ctx, metrics))

    assert (seen["authledger_emails_abandoned_total"], seen["authledger_emails_redriven_total"]) == ("1", "1")


def test_worker_gauges_show_sends_in_flight_and_the_circuit_state_of_the_running_worker(
    ctx: ServiceContext, engine: Engine
) -> None:
    metrics = started(engine)
    busy = RebuiltWorker(owner="host-1:42", in_flight=17, circuit_state="half_open", delivered={})

    seen = samples(render(ctx, metrics, busy))  # type: ignore[arg-type]  # the shape, not the class

    assert seen['authledger_delivery_in_flight{worker="host-1:42"}'] == "17"
    assert seen['authledger_delivery_circuit_state{worker="host-1:42",state="half_open"}'] == "1"
    assert seen['authledger_delivery_circuit_state{worker="host-1:42",state="closed"}'] == "0"
    assert seen['authledger_delivery_circuit_state{worker="host-1:42",state="open"}'] == "0"


def test_a_worker_without_a_window_or_a_circuit_reads_as_idle_and_closed(ctx: ServiceContext, engine: Engine) -> None:
    metrics = started(engine)

    seen = samples(render(ctx, metrics, OldWorker(owner="plain", delivered={})))  # type: ignore[arg-type]

    assert seen['authledger_delivery_in_flight{worker="plain"}'] == "0"
    assert seen['authledger_delivery_circuit_state{worker="plain",state="closed"}'] == "1"


def test_the_real_worker_is_read_whichever_attributes_it_has(ctx: ServiceContext, engine: Engine) -> None:
    worker = Worker(ctx, RecordingMailer(), sender=SENDER, owner="real")

    seen = samples(render(ctx, started(engine), worker))

    assert int(seen['authledger_delivery_in_flight{worker="real"}']) == 0
    assert sum(int(seen[f'authledger_delivery_circuit_state{{worker="real",state="{state}"}}'])
               for state in ("closed", "open", "half_open")) == 1


def test_without_a_worker_in_this_process_the_gauges_have_no_samples(ctx: ServiceContext, engine: Engine) -> None:
    exposition = render(ctx, started(engine))
    assert "# TYPE authledger_delivery_in_flight gauge" in exposition
    assert "# TYPE authledger_delivery_circuit_state gauge" in exposition
    assert not any(name.startswith("authledger_delivery_in_flight") for name in samples(exposition))
