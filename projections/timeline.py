"""A readable timeline of events: one line each, with who did it and the delivery details.

Pure: it takes recorded events (any order) and returns entries in log order.
``history`` and ``explain`` print these; ``projections.explain`` turns the
same events into sentences that answer the review questions directly.

Times are the event's own (``requested_at``, ``claimed_at``...), which is
when the service decided it; an event without one (a supersession) takes the
time of the other events of its transaction. Every time is shown in UTC with
its offset.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from attrs import asdict, frozen

from domain import clients, counting, email, otp_events, outage, privacy, request_rules, reset_events, suppression
from domain import tenants, webhooks
from domain.log import RecordedEvent

TIME_FIELDS = (
    "requested_at", "issued_at", "completed_at", "refused_at", "claimed_at", "expired_at", "released_at",
    "failed_at", "accepted_at", "skipped_at", "abandoned_at", "verified_at", "locked_at", "bound_at",
    "available_at", "erased_at", "created_at", "revoked_at", "rewrapped_at", "rejected_at", "settled_at",
    "invalidated_at", "delivered_at", "bounced_at", "complained_at", "suppressed_at", "lifted_at",
)


def format_time(moment: datetime | None) -> str:
    """``2024-05-01 10:02:11.000+00:00``: UTC, to the millisecond, the offset shown."""
    if moment is None:
        return "-"
    return moment.astimezone(UTC).isoformat(sep=" ", timespec="milliseconds")


def own_time(event: object) -> datetime | None:
    for name in TIME_FIELDS:
        value = getattr(event, name, None)
        if isinstance(value, datetime):
            return value
    return None


def event_times(events: Iterable[RecordedEvent]) -> dict[int, datetime | None]:
    """Position -> when it happened: its own time, else its transaction's, else when it was recorded."""
    events = list(events)
    by_transaction: dict[int, datetime] = {}
    for r in events:
        moment = own_time(r.event)
        if moment is not None:
            by_transaction.setdefault(r.transaction_id, moment)
    return {r.global_position: own_time(r.event) or by_transaction.get(r.transaction_id) or r.recorded_at
            for r in events}


@frozen
class TimelineEntry:
    at: datetime | None
    recorded_at: datetime | None
    global_position: int
    stream_id: str
    event_type: str
    actor: str | None  # the worker holding the lease, or who asked (metadata actor)
    request_id: UUID | None
    message_id: UUID | None
    lease_token: UUID | None
    attempt: int | None
    key_id: str | None
    provider_message_id: str | None
    reason: str | None
    recipient: str | None  # the address as the reader was given it: plain text for reviewers, or [erased]
    summary: str

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for name in ("at", "recorded_at"):
            data[name] = data[name].astimezone(UTC).isoformat() if data[name] else None
        return {k: str(v) if isinstance(v, UUID) else v for k, v in data.items()}


def _request_of(event: object, request_of_message: dict[UUID, UUID]) -> UUID | None:
    for name in ("request_id", "challenge_id"):
        value = getattr(event, name, None)
        if isinstance(value, UUID):
            return value
    message_id = getattr(event, "message_id", None)
    return request_of_message.get(message_id) if isinstance(message_id, UUID) else None


def _actor(recorded: RecordedEvent) -> str | None:
    owner: str | None = getattr(recorded.event, "lease_owner", None)
    if owner:
        return owner
    metadata = recorded.metadata or {}
    actor, client, key_id = metadata.get("actor"), metadata.get("client"), metadata.get("key_id")
    if actor and client and client not in str(actor):
        actor = f"{actor} (client {client})"
    actor = actor or (f"client {client}" if client else None)
    # Which of the client's keys acted: after a rotation both may be live.
    return f"{actor} with key {key_id}" if actor and key_id else actor


# Why a presented link or code was refused, as the end of "after it was ...".
PRESENTED_AFTER = {
    "used": "used", "superseded": "superseded", "expired": "expired", "locked": "locked",
    "invalidated": "withdrawn by support",
    "erased": "erased with its user's personal data",
    "account_locked": "locked for the whole account",
}


def presented_after(reason: str) -> str:
    """Why a presentation was refused, in words (an unknown reason is told as it is)."""
    return PRESENTED_AFTER.get(reason, reason)


def counted_answer(event: counting.RequestsCounted) -> str:
    """How the counted calls were answered, in words."""
    if event.answer == "refused":
        return "refused (rate_limited)"
    if event.answer == "rejected":
        return "presentations of links or codes no longer usable, refused"
    return "answered with the open request (their idempotency keys not bound)"


def counted_clients(event: counting.RequestsCounted) -> str:
    """The clients counted calls came from, in words."""
    names = [f"client {name}" if name is not None else "no client" for name in event.clients]
    return ", ".join(names) or "unknown callers"


def summary(event: object) -> str:
    """What happened, in a few words."""
    match event:
        case reset_events.ResetRequested():
            return (f"reset link requested for {event.recipient}, valid until {format_time(event.expires_at)}, "
                    f"email {event.message_id}")
        case reset_events.ResetSuperseded(superseded_by=None):
            return f"superseded ({event.reason})"
        case reset_events.ResetSuperseded() | otp_events.OtpChallengeSuperseded():
            return f"superseded by {event.superseded_by}"
        case reset_events.ResetInvalidated():
            return f"link withdrawn by support ({event.reason})"
        case otp_events.OtpChallengeInvalidated():
            return f"code withdrawn by support ({event.reason})"
        case reset_events.ResetRequestRefused() | otp_events.OtpRequestRefused():
            return f"request refused ({event.reason}), retry after {format_time(event.retry_at)}"
        case reset_events.ResetCompleted():
            return f"link used, password changed; notice {event.notice_message_id} queued"
        case otp_events.OtpChallengeIssued():
            return (f"one-time code requested ({event.purpose}) for {event.recipient}, valid until "
                    f"{format_time(event.expires_at)}, "
                    f"email {event.message_id}")
        case reset_events.ResetTokenRejected():
            return f"link presented again after it was {presented_after(event.reason)}; refused"
        case otp_events.OtpCodeRejected():
            return f"code presented after the challenge was {presented_after(event.reason)}; refused unchecked"
        case otp_events.OtpVerificationFailed():
            return f"wrong code (attempt {event.attempt}, {event.consecutive_failures} in a row)"
        case otp_events.OtpChallengeVerified():
            return "code verified"
        case otp_events.OtpChallengeLockedOut():
            until = f" until {format_time(event.until)}" if event.until else ""
            return f"locked ({event.scope}){until}"
        case counting.RequestsCounted():
            return (f"{event.count} more calls {counted_answer(event)} from {format_time(event.first_at)} to "
                    f"{format_time(event.last_at)}, by {counted_clients(event)}")
        case request_rules.IdempotencyKeyBound():
            return f"idempotency key {event.idempotency_key!r} answered with the open request {event.request_id}"
        case email.EmailQueued():
            return f"email queued ({event.template}) to {event.recipient}"
        case email.LeaseClaimed():
            return f"leased to {event.lease_owner} until {format_time(event.lease_expires_at)}"
        case email.LeaseExpired():
            return f"lease of {event.lease_owner} expired with no outcome recorded"
        case email.LeaseReleased(attempt_returned=True):
            return f"given back by {event.lease_owner} unsent (provider down; the attempt does not count)"
        case email.LeaseReleased():
            return f"given back by {event.lease_owner} (worker stopping)"
        case email.SendAttemptFailed(retry_at=None):
            return f"send failed for good: {event.error}"
        case email.SendAttemptFailed():
            unknown = " (the provider may have received it)" if event.outcome_unknown else ""
            return f"send failed: {event.error}{unknown}; retry at {format_time(event.retry_at)}"
        case email.ProviderAccepted():
            rendered = (f"; rendered with tenant settings version {event.settings_version}"
                        if event.settings_version is not None else "")
            written_in = f", written in {event.locale}" if event.locale else ""
            return f"accepted by provider {event.provider}, id {event.provider_message_id}{written_in}{rendered}"
        case email.DeliverySkipped():
            return f"not sent: skipped ({event.reason})"
        case email.DeliveryAbandoned():
            return f"not sent: abandoned after {event.attempts} attempts ({event.last_error})"
        case email.DeliveryOutcomeUnknown():
            return (f"not sent again: outcome unknown after {event.unknown_outcomes} unanswered attempts "
                    f"({event.last_error}); it may have arrived")
        case email.DeliveryRedriven():
            return f"re-driven by {event.actor} ({event.reason}): queued again"
        case email.ProviderDelivered():
            return f"delivered to the recipient's server ({event.source})"
        case email.ProviderBounced():
            return (f"bounced {'for good' if event.permanent else 'for now'} ({event.source}): "
                    f"{event.diagnostic or 'no diagnostic'}")
        case email.ProviderComplained():
            return f"recipient complained: marked as spam ({event.source})"
        case suppression.AddressSuppressed():
            # The keyed hash, sealed: a reviewer reads it [withheld], a replay after erasure [erased].
            return f"address {event.address_hmac} suppressed ({event.reason}): further creates to it are refused"
        case suppression.SuppressionLifted():
            return f"suppression of address {event.address_hmac} lifted by {event.actor} ({event.reason})"
        case privacy.SubjectErased():
            why = f" ({event.reason})" if event.reason else ""
            return f"personal data erased{why}: {erased_keys(event)}"
        case privacy.DataKeysRewrapped():
            return (f"{event.count} data key(s) re-wrapped from master key(s) {', '.join(event.from_master_key_ids)} "
                    f"onto {event.master_key_id}; the data keys themselves are unchanged")
        case outage.ProviderOutageBegan():
            return (f"provider {event.provider} down: {event.failures} messages failed in a row "
                    f"({event.last_error}); claiming paused, probing")
        case outage.ProviderOutageEnded():
            return f"provider {event.provider} answers again (down since {format_time(event.began_at)})"
        case clients.ClientRegistered():
            return f"API client {event.name} registered with a new key"
        case clients.ClientRevoked():
            return f"API client {event.name} revoked; its key no longer works"
        case clients.ClientKeyIssued():
            return (f"API client {event.name} of tenant {event.tenant} given key {event.key_id} "
                    f"(scopes: {' '.join(event.scopes) or 'none'})")
        case clients.ClientKeyRevoked():
            return f"API client {event.name}: key {event.key_id} revoked, it no longer works"
        case tenants.TenantCreated():
            return f"tenant {event.name} created"
        case tenants.TenantConfigured():
            changed = ", ".join(event.changed) or "nothing"
            return f"tenant {event.name} configured by {event.actor}: {changed} set ({event.reason})"
        case webhooks.WebhookEndpointAdded():
            heard = " ".join(event.event_types) or "every event type"
            return f"webhook endpoint {event.endpoint_id} of tenant {event.tenant} added: {event.url} hears {heard}"
        case webhooks.WebhookSecretRotated():
            return (f"webhook endpoint {event.endpoint_id} given secret {event.secret.secret_id}; the previous one "
                    f"signs too until {format_time(event.previous_until)}")
        case webhooks.WebhookEndpointRemoved():
            return f"webhook endpoint {event.endpoint_id} removed"
        case webhooks.WebhookQueued():
            return (f"webhook {event.event_type} ({event.webhook_id}) queued for endpoint {event.endpoint_id}, "
                    f"about a fact of {format_time(event.occurred_at)}")
    return type(event).__name__  # not for a registered type: a test holds every one to a sentence


def erased_keys(event: privacy.SubjectErased) -> str:
    """Which data keys an erasure destroyed: ids only, they name no person."""
    if not event.key_ids:
        return "no data key was left to destroy"
    return f"data key{'s' if len(event.key_ids) > 1 else ''} {', '.join(event.key_ids)} destroyed"


def timeline(events: Iterable[RecordedEvent]) -> list[TimelineEntry]:
    """One entry per event, in log order."""
    events = sorted(events, key=lambda r: r.global_position)
    times = event_times(events)
    request_of_message = {r.event.message_id: r.event.request_id for r in events
                          if isinstance(r.event, email.EmailQueued)}
    entries = []
    for r in events:
        event = r.event
        reason = getattr(event, "reason", None) or getattr(event, "error", None) or getattr(event, "last_error", None)
        entries.append(TimelineEntry(
            at=times[r.global_position], recorded_at=r.recorded_at, global_position=r.global_position,
            stream_id=r.stream_id, event_type=r.event_type, actor=_actor(r),
            request_id=_request_of(event, request_of_message), message_id=getattr(event, "message_id", None),
            lease_token=getattr(event, "lease_token", None), attempt=getattr(event, "attempt", None),
            key_id=getattr(event, "key_id", None), provider_message_id=getattr(event, "provider_message_id", None),
            reason=reason, recipient=getattr(event, "recipient", None), summary=summary(event),
        ))
    return entries


COLUMNS = ("time (UTC)", "pos", "event", "stream", "actor / worker", "lease", "try", "key", "what")


def render(entries: Iterable[TimelineEntry]) -> str:
    """A plain-text table, one line per event."""
    rows = [COLUMNS] + [(
        format_time(e.at), str(e.global_position), e.event_type, e.stream_id, e.actor or "-",
        str(e.lease_token)[:8] if e.lease_token else "-", str(e.attempt) if e.attempt is not None else "-",
        e.key_id or "-", e.summary,
    ) for e in entries]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1]
        for row in rows
    )
