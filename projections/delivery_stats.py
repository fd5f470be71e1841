"""The ``delivery_stats`` read model: how delivery went, per day, flow and outcome.

A catch-up projection. Percentiles cannot be kept exactly as running
counters, so the fold keeps one small row per message (its outcome, its
attempts and, once accepted, how long it took from queued to accepted) and
``summarise`` aggregates those rows. The SQL report in
``infra.delivery.report`` computes the same figures with ``percentile_disc``,
so a report from the live table equals a report from a replay, exactly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, timedelta
from uuid import UUID

from attrs import evolve, frozen

from domain.email import (
    DeliveryAbandoned,
    DeliveryOutcomeUnknown,
    DeliverySkipped,
    EmailQueued,
    LeaseClaimed,
    LeaseExpired,
    LeaseReleased,
    ProviderAccepted,
    SendAttemptFailed,
)

OUTCOMES = ("pending", "sent", "skipped", "failed", "abandoned", "unknown")
EMAIL_EVENTS = (
    EmailQueued, LeaseClaimed, LeaseExpired, LeaseReleased, SendAttemptFailed, ProviderAccepted,
    DeliverySkipped, DeliveryAbandoned, DeliveryOutcomeUnknown,
)


@frozen
class DeliveryRow:
    message_id: UUID
    flow: str
    template: str
    day: date  # the UTC day the message was queued: the day it counts for
    queued_at: datetime
    outcome: str  # "pending" until the message is sent, skipped, failed, abandoned or left unknown
    attempts: int  # leases claimed: one per hand-over to a worker
    finished_at: datetime | None = None
    time_to_accept: timedelta | None = None  # queued -> accepted by the provider, when sent


def delivery_key(event: object) -> UUID | None:
    return event.message_id if isinstance(event, EMAIL_EVENTS) else None


def evolve_delivery(row: DeliveryRow | None, event: object) -> DeliveryRow | None:
    """The message's row after one more event of its stream."""
    if isinstance(event, EmailQueued):
        queued = event.available_at
        return DeliveryRow(
            message_id=event.message_id, flow=event.flow, template=event.template,
            day=queued.astimezone(UTC).date(), queued_at=queued, outcome="pending", attempts=0,
        )
    if row is None:
        return None
    match event:
        case LeaseClaimed():
            # Counted, not copied from event.attempt: applying an event twice would show.
            return evolve(row, attempts=row.attempts + 1)
        case ProviderAccepted():
            return evolve(row, outcome="sent", finished_at=event.accepted_at,
                          time_to_accept=event.accepted_at - row.queued_at)
        case SendAttemptFailed(retry_at=None):
            return evolve(row, outcome="failed", finished_at=event.failed_at)
        case DeliverySkipped():
            return evolve(row, outcome="skipped", finished_at=event.skipped_at)
        case DeliveryAbandoned():
            return evolve(row, outcome="abandoned", finished_at=event.abandoned_at)
        case DeliveryOutcomeUnknown():
            return evolve(row, outcome="unknown", finished_at=event.settled_at)
    return row


@frozen
class DeliverySummary:
    """One line of the report: messages of one day, flow and outcome."""

    day: date
    flow: str
    outcome: str
    messages: int
    attempts: int
    # Queued -> accepted, over the messages that were sent (None otherwise).
    p50: timedelta | None
    p95: timedelta | None
    max: timedelta | None


def percentile_disc(ordered: Sequence[timedelta], fraction: float) -> timedelta | None:
    """PostgreSQL's ``percentile_disc``: the first value whose cumulative share reaches ``fraction``."""
    if not ordered:
        return None
    return ordered[max(math.ceil(fraction * len(ordered)) - 1, 0)]


def summarise(rows: Iterable[DeliveryRow]) -> list[DeliverySummary]:
    groups: dict[tuple[date, str, str], list[DeliveryRow]] = {}
    for row in rows:
        groups.setdefault((row.day, row.flow, row.outcome), []).append(row)
    report = []
    for (day, flow, outcome), members in sorted(groups.items()):
        latencies = sorted(r.time_to_accept for r in members if r.time_to_accept is not None)
        report.append(DeliverySummary(
            day, flow, outcome, len(members), sum(r.attempts for r in members),
            percentile_disc(latencies, 0.5), percentile_disc(latencies, 0.95),
            latencies[-1] if latencies else None,
        ))
    return report
