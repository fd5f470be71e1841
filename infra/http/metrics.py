"""Prometheus metrics: outbox gauges from ``email_outbox``, counters and latencies from the log.

Outbox gauges (messages by state, due now, age of the oldest due) are read
from the projection at each scrape. Counters and latency histograms fold the
log's delivery events as they commit, following it by the transaction-id
horizon (DESIGN.md, "The event store") from where it stood when this process
started (or, failing that, first scraped): like any process counter they start at zero, and Prometheus'
``rate()`` and ``increase()`` read them across restarts. Each scrape folds at
most ``MAX_EVENTS_PER_SCRAPE`` new events, so a scrape stays cheap after a burst.
Gauges of the worker running in this process (sends in flight, circuit state)
are read from the ``Worker`` that ``create_app`` was handed.

Two views. A tenant's ``metrics`` key sees only what its own tenant's mail
did: the outbox gauges, counters and latencies of its messages, each
labelled ``tenant="<name>"`` (``render(..., tenant=...)``), and nothing of
another tenant's traffic, not even totals it could subtract its own from.
Everything else (totals across tenants, the worker, projection lag, the
horizon) is the deployment's, and needs an ``operator`` key, which only the
CLI grants: that view is the unlabelled exposition operators always had.
"""

from __future__ import annotations

import math
import threading
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection

from domain.tenants import tenant_of
from infra.db.leadership import holders
from infra.db.reading import reading
from infra.eventlog.queries import delivery_events_after, horizon_head
from infra.delivery.status import outbox_status
from infra.projector.status import projection_status
from infra.services.tenants import takeover_changes
from infra.services.unit_of_work import ServiceContext
from infra.delivery.worker import Worker

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_EVENTS_PER_SCRAPE = 20_000
BATCH = 5_000
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

COUNTED = {
    "EmailQueued": "authledger_emails_queued_total",
    "ProviderAccepted": "authledger_emails_sent_total",
    "DeliverySkipped": "authledger_emails_skipped_total",
    "DeliveryAbandoned": "authledger_emails_abandoned_total",
    "DeliveryRedriven": "authledger_emails_redriven_total",
    "DeliveryOutcomeUnknown": "authledger_emails_outcome_unknown_total",
    "SendAttemptFailed": "authledger_send_attempts_failed_total",
    "LeaseClaimed": "authledger_leases_claimed_total",
    "LeaseExpired": "authledger_lease_expirations_total",
}
HELP = {
    "authledger_emails_queued_total": "Emails queued.",
    "authledger_emails_sent_total": "Emails accepted by the provider.",
    "authledger_emails_skipped_total": "Emails skipped because they went stale (superseded, expired, used).",
    "authledger_emails_abandoned_total": "Emails given up after the attempt limit.",
    "authledger_emails_redriven_total": "Abandoned, failed or unknown emails an operator sent back to the queue.",
    "authledger_emails_outcome_unknown_total": "Emails not sent again because a provider that cannot drop repeats "
                                               "may have received them already.",
    "authledger_send_attempts_failed_total": "Failed send attempts, retryable or not.",
    "authledger_leases_claimed_total": "Leases claimed by workers.",
    "authledger_lease_expirations_total": "Leases that ran out before their worker recorded an outcome.",
}
HISTOGRAMS = {
    "authledger_claim_latency_seconds": "From queued to first claimed by a worker.",
    "authledger_send_latency_seconds": "From lease claimed to accepted by the provider.",
    "authledger_delivery_latency_seconds": "From queued to accepted by the provider.",
}


class Histogram:
    def __init__(self) -> None:
        self.counts = [0] * len(BUCKETS)
        self.total = 0
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        seconds = max(seconds, 0.0)
        self.total += 1
        self.sum += seconds
        for index, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self.counts[index] += 1

    def add(self, other: Histogram) -> None:
        self.counts = [mine + theirs for mine, theirs in zip(self.counts, other.counts, strict=True)]
        self.total += other.total
        self.sum += other.sum

    def lines(self, name: str, labels: str = "") -> list[str]:
        """The exposition lines; ``labels`` (``tenant="acme",``) go before ``le`` and alone on sum and count."""
        alone = f"{{{labels.rstrip(',')}}}" if labels else ""
        out = [f'{name}_bucket{{{labels}le="{bound}"}} {count}'
               for bound, count in zip(BUCKETS, self.counts, strict=True)]
        return out + [f'{name}_bucket{{{labels}le="+Inf"}} {self.total}', f"{name}_sum{alone} {self.sum:.6f}",
                      f"{name}_count{alone} {self.total}"]


class Tally:
    """The counters and histograms of one tenant's messages."""

    def __init__(self) -> None:
        self.counters = dict.fromkeys(HELP, 0)
        self.histograms = {name: Histogram() for name in HISTOGRAMS}

    def add(self, other: Tally) -> None:
        for name, value in other.counters.items():
            self.counters[name] += value
        for name, histogram in other.histograms.items():
            self.histograms[name].add(histogram)


class LogMetrics:
    """Counters and histograms folded from the log, per tenant; one per process, safe to scrape from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._checkpoint: tuple[str, int] | None = None
        self.tallies: dict[str, Tally] = {}  # by tenant; as many as tenants whose mail moved since start

    def start(self, connection: Connection) -> None:
        """Count from the log's horizon now (at app start, or else at the first scrape)."""
        with self._lock:
            if self._checkpoint is None:
                head = horizon_head(connection)
                self._checkpoint = (head.tx, head.global_position) if head else ("0", 0)

    def catch_up(self, connection: Connection) -> None:
        if self._checkpoint is None:
            self.start(connection)
            return
        with self._lock:
            folded = 0
            while folded < MAX_EVENTS_PER_SCRAPE:
                assert self._checkpoint is not None
                tx, pos = self._checkpoint
                rows = delivery_events_after(connection, tx, pos, BATCH)
                for row in rows:
                    self._fold(row)
                if rows:
                    self._checkpoint = (rows[-1].tx, rows[-1].global_position)
                folded += len(rows)
                if len(rows) < BATCH:
                    break

    def _fold(self, row: Any) -> None:
        name = COUNTED.get(row.event_type)
        if name is None:
            return
        # A message's first event names its user, whose scoped id names the tenant.
        tally = self.tallies.setdefault(tenant_of(row.user_id or ""), Tally())
        tally.counters[name] += 1
        if row.at is None or row.queued_at is None:
            return
        if row.event_type == "LeaseClaimed" and row.attempt == 1:
            self._observe(tally, "authledger_claim_latency_seconds", row.at - row.queued_at)
        if row.event_type == "ProviderAccepted":
            self._observe(tally, "authledger_delivery_latency_seconds", row.at - row.queued_at)
            if row.claimed_at is not None:
                self._observe(tally, "authledger_send_latency_seconds", row.at - row.claimed_at)

    @staticmethod
    def _observe(tally: Tally, name: str, elapsed: timedelta) -> None:
        tally.histograms[name].observe(elapsed.total_seconds())

    def tally(self, tenant: str | None = None) -> Tally:
        """A copy of ``tenant``'s counters and histograms, or of every tenant's added up."""
        total = Tally()
        with self._lock:
            for name, tally in self.tallies.items():
                if tenant is None or name == tenant:
                    total.add(tally)
        return total

    def lines(self, tenant: str | None = None) -> list[str]:
        """The counters and histograms of every tenant (unlabelled), or of ``tenant`` (labelled with it)."""
        tally = self.tally(tenant)
        labels = "" if tenant is None else f'tenant="{tenant}",'
        alone = f"{{{labels.rstrip(',')}}}" if labels else ""
        out = []
        for name, value in tally.counters.items():
            out += [f"# HELP {name} {HELP[name]}", f"# TYPE {name} counter", f"{name}{alone} {value}"]
        for name, histogram in tally.histograms.items():
            out += [f"# HELP {name} {HISTOGRAMS[name]}", f"# TYPE {name} histogram", *histogram.lines(name, labels)]
        return out


def _gauge(name: str, help_text: str, samples: list[tuple[str, float]]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} gauge",
            *(f"{name}{labels} {value}" for labels, value in samples)]


CIRCUIT_STATES = ("closed", "open", "half_open")


def worker_lines(worker: Worker | None) -> list[str]:
    """Sends in flight and the circuit state of this process's worker, labelled by its owner.

    Read with defaults, so that a worker without a window or a circuit shows
    0 in flight and a closed circuit rather than breaking the scrape.
    """
    if worker is None:
        in_flight: list[tuple[str, float]] = []
        circuit: list[tuple[str, float]] = []
    else:
        owner = str(getattr(worker, "owner", "worker")).replace("\\", "\\\\").replace('"', '\\"')
        state = str(getattr(worker, "circuit_state", "closed"))
        in_flight = [(f'{{worker="{owner}"}}', int(getattr(worker, "in_flight", 0)))]
        circuit = [(f'{{worker="{owner}",state="{name}"}}', int(name == state)) for name in CIRCUIT_STATES]
    out = _gauge("authledger_delivery_in_flight", "Provider calls this worker has in flight now.", in_flight)
    return out + _gauge("authledger_delivery_circuit_state",
                        "The worker's provider circuit: 1 for its current state (closed, open or half_open), "
                        "0 for the others.", circuit)


def operations_lines(ctx: ServiceContext, worker: Worker | None) -> list[str]:
    """Projection lag, the horizon's age and fenced outcomes: what operators alert on (docs/operations.md)."""
    status = projection_status(ctx.engine)
    catch_up = [p for p in status.projections if p.kind == "catch-up"]
    oldest = status.oldest_open_transaction
    out = _gauge("authledger_projection_lag_events", "Committed events a catch-up projection has not applied yet.",
                 [(f'{{projection="{p.name}"}}', p.lag_events) for p in catch_up])
    out += _gauge("authledger_projection_lag_seconds", "Age of the oldest event a catch-up projection has not applied.",
                  [(f'{{projection="{p.name}"}}', p.lag_seconds) for p in catch_up])
    out += _gauge("authledger_horizon_age_seconds",
                  "How long the oldest open transaction has held back every whole-log reader (0 when none).",
                  [("", oldest.age_seconds if oldest else 0.0)])
    with reading(ctx.engine) as connection:
        held = holders(connection)
    out += _gauge("authledger_role_held",
                  "1 for the host running a role that runs once per deployment (catch-up, closed-counts); 0 with "
                  "holder=\"\" when no host runs it.",
                  [(f'{{role="{role}",holder="{holder or ""}"}}', 1 if holder else 0) for role, holder in held.items()])
    out += worker_lines(worker)
    fenced = worker.delivered.get("lease_lost", 0) if worker is not None else 0
    out += [
        "# HELP authledger_fenced_outcomes_total Outcomes not recorded because the lease was taken over "
        "(each one a duplicate prevented by fencing), by this process's workers.",
        "# TYPE authledger_fenced_outcomes_total counter",
        f"authledger_fenced_outcomes_total {fenced}",
    ]
    return out


def outbox_lines(ctx: ServiceContext, tenant: str | None = None) -> list[str]:
    """The outbox gauges of every tenant (unlabelled), or of ``tenant``'s messages (labelled with it)."""
    status = outbox_status(ctx.engine, now=ctx.clock.now(), tenant=tenant)
    label = "" if tenant is None else f'tenant="{tenant}"'
    alone = f"{{{label}}}" if label else ""
    out = ["# HELP authledger_outbox_messages Messages in the outbox by state.",
           "# TYPE authledger_outbox_messages gauge"]
    out += [f'authledger_outbox_messages{{{label + "," if label else ""}state="{state}"}} {n}'
            for state, n in status["by_state"].items()]
    oldest = status["oldest_due_seconds"]
    return out + [
        "# HELP authledger_outbox_due_messages Pending or lease-expired messages due now.",
        "# TYPE authledger_outbox_due_messages gauge",
        f"authledger_outbox_due_messages{alone} {status['due_now']}",
        "# HELP authledger_outbox_oldest_due_seconds Age of the oldest message due now (0 when none).",
        "# TYPE authledger_outbox_oldest_due_seconds gauge",
        f"authledger_outbox_oldest_due_seconds{alone} "
        f"{0 if oldest is None or math.isnan(oldest) else max(oldest, 0)}",
    ]


TAKEOVER_METRIC = "authledger_tenant_takeover_changes_total"


def takeover_lines(ctx: ServiceContext, tenant: str | None = None) -> list[str]:
    """Changes of where a tenant's links or mail go (reset URL, sender, sender name, reply-to), by tenant: from
    the settings' projection, so the count is the log's since the tenant began, whichever process scrapes."""
    counts = takeover_changes(ctx.engine, tenant)
    out = [f"# HELP {TAKEOVER_METRIC} Configurations that changed a tenant's reset URL, sender, sender name or "
           "reply-to (a takeover path: each is also logged at WARNING).",
           f"# TYPE {TAKEOVER_METRIC} counter"]
    if tenant is not None:
        return [*out, f'{TAKEOVER_METRIC}{{tenant="{tenant}"}} {counts.get(tenant, 0)}']
    return [*out, *(f'{TAKEOVER_METRIC}{{tenant="{name}"}} {n}' for name, n in sorted(counts.items()))]


def render(ctx: ServiceContext, log_metrics: LogMetrics, worker: Worker | None = None, *,
           tenant: str | None = None) -> str:
    """The whole exposition, gauges first: the deployment's (``tenant`` None), or one tenant's series only."""
    out = outbox_lines(ctx, tenant) + takeover_lines(ctx, tenant)
    with ctx.engine.connect() as connection:
        log_metrics.catch_up(connection)
    deployment = operations_lines(ctx, worker) if tenant is None else []
    return "\n".join(out + deployment + log_metrics.lines(tenant)) + "\n"
