"""One claimed message's delivery, step by step: fresh state, send, outcome — never a stale email.

Each message is read fresh right before its send (``infra/delivery/fresh.py``),
sent with the message id as idempotency key, and its outcome recorded fenced
by its lease token. These are the steps; ``infra/delivery/pipeline.py``
runs many of them at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from uuid import UUID

from attrs import frozen
from sqlalchemy import Engine

from domain.delivery import enough_lease_left, failure_events, outcome_left_unknown
from domain.email import DeliverySkipped, LeaseReleased, ProviderAccepted
from infra.delivery.fresh import Prepared
from infra.delivery.leases import Claim, record_outcomes
from infra.delivery.providers import ProviderReceipt, SendFailed
from infra.logs import log_event
from infra.services.unit_of_work import ServiceContext

log = logging.getLogger("authledger.delivery")
GIVEN_UP = frozenset({"abandoned", "failed", "unknown"})

@frozen
class Attempt:
    """What one delivery attempt amounts to: the events to record and how to report them."""

    events: list[object]
    outcome: str  # for the log line: "accepted", "skipped", "send_failed", ...
    state: str  # the message's state once recorded
    provider_message_id: str | None = None
    error: str | None = None


@frozen
class Sent:
    """One message handled, its outcome not yet recorded."""

    claim: Claim
    prepared: Prepared
    result: Attempt
    handled_at: datetime


def without_sending(ctx: ServiceContext, claim: Claim, prepared: Prepared, *, idempotent: bool) -> Attempt | None:
    """The outcome when the provider must not be called (unwanted, maybe sent already, too little lease left).

    None when it may be called. ``idempotent`` is the provider's: whether it
    drops a second send of a message id itself.
    """
    row, policy, now = claim.row, ctx.delivery_policy, ctx.clock.now()
    if prepared.error is not None:
        # Not to be sent as things are (a webhook secret no configured master key opens): retried with backoff
        # until it can be, or until its horizon; never a stall of the rest of its group.
        events = failure_events(
            row.message_id, lease_token=claim.lease_token, attempt=row.attempt_count, error=prepared.error,
            retryable=True, outcome_unknown=False, now=now, jitter=0.5, policy=policy,
            useful_until=prepared.useful_until,
        )
        return Attempt(events, "not_sendable", "abandoned" if len(events) > 1 else "pending", error=prepared.error)
    if not prepared.sendable:
        assert prepared.skip_reason is not None  # prepare() gives a reason whenever it gives no email
        skipped = DeliverySkipped(row.message_id, now, prepared.skip_reason, claim.lease_token)
        return Attempt([skipped], "skipped", "skipped")
    unknown = outcome_left_unknown(
        row.message_id, unknown_outcomes=row.unknown_outcomes, idempotent=idempotent, last_error=row.last_error,
        lease_token=claim.lease_token, now=now, policy=policy,
    )
    if unknown is not None:
        return Attempt([unknown], "outcome_unknown", "unknown", error=unknown.last_error)
    assert row.lease_expires_at is not None  # the row is claimed: its lease has an end
    if not enough_lease_left(row.lease_expires_at, now=now, policy=policy):
        # Too little lease left to finish a provider call safely: give it back.
        events = failure_events(
            row.message_id, lease_token=claim.lease_token, attempt=row.attempt_count,
            error="lease margin exhausted before sending", retryable=True, outcome_unknown=False,
            now=now, jitter=0.0, policy=policy,
        )
        return Attempt(events, "lease_margin_exhausted", "pending")
    return None


def after_sending(
    ctx: ServiceContext, claim: Claim, prepared: Prepared, answer: ProviderReceipt | SendFailed,
    jitter: Callable[[], float],
) -> Attempt:
    """The outcome of a provider call: accepted, or a failure to retry or to give up on."""
    row, now = claim.row, ctx.clock.now()
    if isinstance(answer, SendFailed):
        events = failure_events(
            row.message_id, lease_token=claim.lease_token, attempt=row.attempt_count, error=answer.message,
            retryable=answer.retryable, outcome_unknown=answer.outcome_unknown, now=now,
            jitter=jitter(), policy=ctx.delivery_policy, useful_until=prepared.useful_until,
        )
        state = "abandoned" if len(events) > 1 else ("pending" if answer.retryable else "failed")
        return Attempt(events, "send_failed", state, error=answer.message)
    accepted = ProviderAccepted(
        row.message_id, claim.lease_token, row.attempt_count, now,
        answer.provider, answer.provider_message_id, prepared.key_id, prepared.settings_version,
        prepared.email.locale if prepared.email is not None else None,
    )
    return Attempt([accepted], "accepted", "sent", provider_message_id=answer.provider_message_id)


def released(ctx: ServiceContext, claim: Claim, owner: str, *, attempt_returned: bool) -> Sent:
    """Give a claimed, unsent message back: the worker is stopping, or its provider is down."""
    now = ctx.clock.now()
    event = LeaseReleased(claim.row.message_id, owner, claim.lease_token, now, attempt_returned)
    outcome = "released_unsent" if attempt_returned else "released"
    return Sent(claim, Prepared(None, None), Attempt([event], outcome, "pending"), now)


def record(engine: Engine, sent: Sequence[Sent], owner: str) -> dict[UUID, str]:
    """Record outcomes in one transaction, each fenced by its lease token; the state each message ends in."""
    if not sent:
        return {}
    with engine.begin() as connection:
        recorded = record_outcomes(connection, [(item.claim, item.result.events) for item in sent], owner=owner)
    return {item.claim.row.message_id: _log_outcome(item, owner, item.claim.row.message_id in recorded)
            for item in sent}


def _log_outcome(sent: Sent, owner: str, recorded: bool) -> str:
    row, result = sent.claim.row, sent.result
    fields = {
        "message_id": row.message_id, "lease_owner": owner, "lease_expires_at": row.lease_expires_at,
        "request_id": row.request_id, "attempt": row.attempt_count, "template": row.template,
        "key_id": sent.prepared.key_id, "outcome": result.outcome,
        "provider_message_id": result.provider_message_id, "error": result.error,
    }
    if not recorded:
        log_event(log, "lease lost; outcome not recorded", logging.WARNING, **fields)
        return "lease_lost"
    if result.outcome == "released":
        log_event(log, "lease released on shutdown", message_id=row.message_id, lease_owner=owner)
    elif result.outcome == "released_unsent":
        log_event(log, "lease released; provider down", message_id=row.message_id, lease_owner=owner)
    else:
        # Mail given up on (abandoned at the hard cap, refused for good, or
        # left unknown) is what an operator must hear about: it will not
        # arrive on its own, or may have arrived without our knowing.
        level = logging.WARNING if result.state in GIVEN_UP else logging.INFO
        log_event(log, f"delivery {result.outcome}", level, state=result.state,
                  skip_reason=sent.prepared.skip_reason, **fields)
    return result.state
