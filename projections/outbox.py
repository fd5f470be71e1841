"""The ``email_outbox`` read model: one row per message, its state and its lease.

A pure fold of the ``email:<message_id>`` stream, and of the
``webhook:<delivery_id>`` stream of each webhook delivery (``flow`` is
"webhook", ``template`` its event type, ``user_id`` the endpoint scoped by
its tenant, so that claims go round-robin by tenant for both, and
``request_id`` the fact it tells of): one outbox, one set of leases. The worker's claim query
reads it; the worker writes it only through ``evolve_outbox``, so the table
always equals a replay of the log.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from attrs import evolve, frozen

from domain.email import (
    DeliveryAbandoned,
    DeliveryOutcomeUnknown,
    DeliveryRedriven,
    DeliverySkipped,
    EmailQueued,
    LeaseClaimed,
    LeaseExpired,
    LeaseReleased,
    ProviderAccepted,
    SendAttemptFailed,
)
from domain.webhooks import WEBHOOK_FLOW, WebhookQueued
from domain.tenants import scoped_user

STATES = ("pending", "leased", "sent", "skipped", "failed", "abandoned", "unknown")
TERMINAL = frozenset({"sent", "skipped", "failed", "abandoned", "unknown"})


@frozen
class OutboxRow:
    message_id: UUID
    flow: str
    template: str
    user_id: str
    request_id: UUID
    state: str
    # When the message is next due: queued time, retry time, or, while
    # leased, the lease expiry (so one index on available_at finds both
    # pending rows and leases that ran out).
    available_at: datetime
    queued_at: datetime
    stream_version: int
    lease_owner: str | None = None
    lease_token: UUID | None = None
    lease_expires_at: datetime | None = None
    attempt_count: int = 0
    provider_message_id: str | None = None
    last_error: str | None = None
    skip_reason: str | None = None
    finished_at: datetime | None = None
    # Attempts that may have reached the provider unanswered (an unknown
    # outcome, a lease that ran out): domain.delivery.outcome_left_unknown
    # bounds how many there may be before the message is sent no more.
    unknown_outcomes: int = 0


def evolve_outbox(row: OutboxRow | None, event: object) -> OutboxRow | None:
    """The row after one more event of its stream (``None`` before ``EmailQueued`` or ``WebhookQueued``)."""
    if isinstance(event, EmailQueued):
        return OutboxRow(
            message_id=event.message_id, flow=event.flow, template=event.template, user_id=event.user_id,
            request_id=event.request_id, state="pending", available_at=event.available_at,
            queued_at=event.available_at, stream_version=1,
        )
    if isinstance(event, WebhookQueued):
        return OutboxRow(
            message_id=event.delivery_id, flow=WEBHOOK_FLOW, template=event.event_type,
            user_id=scoped_user(event.tenant, event.endpoint_id), request_id=event.source_event_id,
            state="pending", available_at=event.available_at, queued_at=event.available_at, stream_version=1,
        )
    if row is None:
        return None
    row = evolve(row, stream_version=row.stream_version + 1)
    match event:
        case LeaseClaimed():
            return evolve(
                row, state="leased", lease_owner=event.lease_owner, lease_token=event.lease_token,
                lease_expires_at=event.lease_expires_at, available_at=event.lease_expires_at,
                attempt_count=event.attempt,
            )
        case LeaseExpired():
            return evolve(row, state="pending", lease_owner=None, lease_token=None, lease_expires_at=None,
                          unknown_outcomes=row.unknown_outcomes + 1)
        case LeaseReleased():
            return evolve(
                row, state="pending", available_at=event.released_at, lease_owner=None, lease_token=None,
                lease_expires_at=None,
                attempt_count=row.attempt_count - 1 if event.attempt_returned else row.attempt_count,
            )
        case ProviderAccepted():
            return evolve(
                row, state="sent", provider_message_id=event.provider_message_id, lease_owner=None,
                lease_token=None, lease_expires_at=None, finished_at=event.accepted_at,
            )
        case SendAttemptFailed(retry_at=None):
            return evolve(
                row, state="failed", last_error=event.error, lease_owner=None, lease_token=None,
                lease_expires_at=None, finished_at=event.failed_at,
            )
        case SendAttemptFailed(retry_at=datetime() as retry_at):
            return evolve(
                row, state="pending", available_at=retry_at, last_error=event.error,
                lease_owner=None, lease_token=None, lease_expires_at=None,
                unknown_outcomes=row.unknown_outcomes + event.outcome_unknown,
            )
        case DeliverySkipped():
            return evolve(
                row, state="skipped", skip_reason=event.reason, lease_owner=None, lease_token=None,
                lease_expires_at=None, finished_at=event.skipped_at,
            )
        case DeliveryAbandoned():
            return evolve(
                row, state="abandoned", last_error=event.last_error, lease_owner=None, lease_token=None,
                lease_expires_at=None, finished_at=event.abandoned_at,
            )
        case DeliveryOutcomeUnknown():
            return evolve(
                row, state="unknown", last_error=event.last_error, lease_owner=None, lease_token=None,
                lease_expires_at=None, finished_at=event.settled_at,
            )
        case DeliveryRedriven():
            # Due at once, with a fresh attempt count (an attempt cap counts
            # from the re-drive); the last error stays as the reason it stopped.
            # An operator re-drives an unknown outcome having found it never
            # arrived, so its unknown attempts count from none again too.
            return evolve(row, state="pending", available_at=event.redriven_at, attempt_count=0, finished_at=None,
                          unknown_outcomes=0)
    return row


def fold_outbox(events: list[object]) -> OutboxRow | None:
    row = None
    for event in events:
        row = evolve_outbox(row, event)
    return row
