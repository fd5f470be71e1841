"""Delivering claimed messages: fresh state, send, record — never a stale email.

Each message is read fresh right before its send (``infra/delivery/fresh.py``),
sent with the message id as idempotency key, and its outcome recorded fenced
by its lease token.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta

from attrs import frozen
from sqlalchemy import Connection

from domain.delivery import enough_lease_left, failure_events
from domain.email import DeliverySkipped, LeaseReleased, ProviderAccepted
from infra.logs import log_event
from infra.delivery.fresh import Prepared, prepare
from infra.delivery.leases import Claim, record_outcomes
from infra.delivery.providers import Mailer, SendFailed
from infra.services.unit_of_work import ServiceContext

log = logging.getLogger("authledger.delivery")


@frozen
class Attempt:
    """What one delivery attempt amounts to: the events to record and how to report them."""

    events: list[object]
    outcome: str  # for the log line: "accepted", "skipped", "send_failed", ...
    state: str  # the message's state once recorded
    provider_message_id: str | None = None
    error: str | None = None


def attempt(
    ctx: ServiceContext, claim: Claim, prepared: Prepared, mailer: Mailer, jitter: Callable[[], float]
) -> Attempt:
    """Send (or decide not to) and say what to record; touches no database."""
    row, policy, now = claim.row, ctx.delivery_policy, ctx.clock.now()
    if prepared.email is None:
        skipped = DeliverySkipped(row.message_id, now, prepared.skip_reason, claim.lease_token)
        return Attempt([skipped], "skipped", "skipped")
    if not enough_lease_left(row.lease_expires_at, now=now, policy=policy):
        # Too little lease left to finish a provider call safely: give it back.
        events = failure_events(
            row.message_id, lease_token=claim.lease_token, attempt=row.attempt_count,
            error="lease margin exhausted before sending", retryable=True, outcome_unknown=False,
            now=now, jitter=0.0, policy=policy,
        )
        return Attempt(events, "lease_margin_exhausted", "pending")
    try:
        receipt = mailer.send(prepared.email)
    except SendFailed as error:
        events = failure_events(
            row.message_id, lease_token=claim.lease_token, attempt=row.attempt_count, error=error.message,
            retryable=error.retryable, outcome_unknown=error.outcome_unknown, now=ctx.clock.now(),
            jitter=jitter(), policy=policy, useful_until=prepared.useful_until,
        )
        state = "abandoned" if len(events) > 1 else ("pending" if error.retryable else "failed")
        return Attempt(events, "send_failed", state, error=error.message)
    accepted = ProviderAccepted(
        row.message_id, claim.lease_token, row.attempt_count, ctx.clock.now(),
        receipt.provider, receipt.provider_message_id, prepared.key_id,
    )
    return Attempt([accepted], "accepted", "sent", provider_message_id=receipt.provider_message_id)


@frozen
class _Sent:
    """One message handled, its outcome not yet recorded."""

    claim: Claim
    prepared: Prepared
    result: Attempt
    handled_at: datetime


# With a provider that drops repeats, outcomes wait for the rest of the batch
# at most this long: a slow provider must not keep a batch unrecorded until
# its leases run out and another worker sends it all again.
RECORD_WITHIN = timedelta(seconds=1)


def deliver_batch(
    ctx: ServiceContext, claims: Sequence[Claim], mailer: Mailer, *, owner: str, sender: str,
    stopping: threading.Event | None = None, jitter: Callable[[], float] = random.random,
) -> list[str]:
    """Send claimed messages one by one and record what happened; the state each message ends in.

    Each message is read fresh right before its own send. When the provider
    drops a repeated message id (``mailer.idempotent``), outcomes are
    recorded together, after the last send of the batch or once the oldest
    has waited ``RECORD_WITHIN``: a crash before that re-sends them, after
    their leases run out, under the same idempotency key, which the provider
    absorbs. Otherwise (SMTP) each outcome is recorded right after its send,
    so a crash repeats at most the message in flight. Once ``stopping`` is
    set, the messages not yet sent are given back with ``LeaseReleased``.
    """
    states: list[str] = []
    unrecorded: list[_Sent] = []
    with ctx.engine.connect() as connection:
        for index, claim in enumerate(claims):
            if stopping is not None and stopping.is_set():
                unrecorded += [_released(ctx, rest, owner) for rest in claims[index:]]
                break
            with _outside_a_transaction(connection):
                prepared = prepare(ctx, claim, sender=sender, connection=connection)
            result = attempt(ctx, claim, prepared, mailer, jitter)
            unrecorded.append(_Sent(claim, prepared, result, ctx.clock.now()))
            if not mailer.idempotent or ctx.clock.now() - unrecorded[0].handled_at >= RECORD_WITHIN:
                states += _record(connection, unrecorded, owner)
                unrecorded = []
        states += _record(connection, unrecorded, owner)
    return states


def deliver(
    ctx: ServiceContext, claim: Claim, mailer: Mailer, *, owner: str, sender: str,
    jitter: Callable[[], float] = random.random,
) -> str:
    """Send one claimed message and record what happened; returns the message's new state."""
    [state] = deliver_batch(ctx, [claim], mailer, owner=owner, sender=sender, jitter=jitter)
    return state


@contextlib.contextmanager
def _outside_a_transaction(connection: Connection) -> Iterator[None]:
    """Run the fresh read in autocommit: no transaction is left open across the provider call.

    A transaction held over a slow send would hold back every reader of the
    log. Under READ COMMITTED each statement of the read sees its own snapshot
    either way, so autocommit only spares the BEGIN and ROLLBACK round trips.
    """
    connection.execution_options(isolation_level="AUTOCOMMIT")
    try:
        yield
    finally:
        connection.rollback()  # ends SQLAlchemy's own bookkeeping; nothing goes to the server
        connection.execution_options(isolation_level=connection.default_isolation_level)


def _released(ctx: ServiceContext, claim: Claim, owner: str) -> _Sent:
    now = ctx.clock.now()
    event = LeaseReleased(claim.row.message_id, owner, claim.lease_token, now)
    return _Sent(claim, Prepared(None, None), Attempt([event], "released", "pending"), now)


def _record(connection: Connection, sent: Sequence[_Sent], owner: str) -> list[str]:
    if not sent:
        return []
    with connection.begin():
        recorded = record_outcomes(connection, [(item.claim, item.result.events) for item in sent], owner=owner)
    return [_log_outcome(item, owner, item.claim.row.message_id in recorded) for item in sent]


def _log_outcome(sent: _Sent, owner: str, recorded: bool) -> str:
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
    else:
        log_event(log, f"delivery {result.outcome}", state=result.state, skip_reason=sent.prepared.skip_reason,
                  **fields)
    return result.state
