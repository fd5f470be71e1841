"""The lease queries on ``email_outbox``: claim due messages, record outcomes fenced by lease token.

Both write through the unit of work, which appends the events and folds them
into the outbox rows in the same transaction, through the same pure
``evolve_outbox`` a replay uses. The rows are already locked here, so they
are handed to it rather than read again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from uuid import UUID, uuid4

from attrs import frozen
from sqlalchemy import Connection, text

from domain.delivery import DeliveryPolicy, LeaseView, claim_events
from domain.email import email_stream
from infra.projector.inline import OUTBOX
from infra.services.unit_of_work import append_and_fold
from projections.outbox import OutboxRow

# Due: pending and available, or leased with a lease that ran out (a leased
# row's available_at is its lease expiry). SKIP LOCKED lets many workers
# claim side by side without waiting on each other's rows.
CLAIM = text("""
    SELECT * FROM email_outbox
     WHERE state IN ('pending', 'leased') AND available_at <= :now
     ORDER BY available_at
     LIMIT :limit
       FOR UPDATE SKIP LOCKED
""")

LEASES_OF = text("SELECT message_id, state, lease_token FROM email_outbox WHERE message_id = ANY(:ids)")

NEXT_DUE = text("SELECT min(available_at) FROM email_outbox WHERE state IN ('pending', 'leased')")


@frozen
class Claim:
    """A message this worker may send until ``row.lease_expires_at``."""

    row: OutboxRow

    @property
    def lease_token(self) -> UUID:
        assert self.row.lease_token is not None
        return self.row.lease_token


def claim_due(
    connection: Connection, *, owner: str, limit: int, now: datetime, policy: DeliveryPolicy,
    new_token: Callable[[], UUID] = uuid4,
) -> list[Claim]:
    """Lease up to ``limit`` due messages to ``owner``; the caller commits."""
    found = connection.execute(CLAIM, {"now": now, "limit": limit})
    due = {row.message_id: OutboxRow(**row._mapping) for row in found}
    if not due:
        return []
    batches = []
    for row in due.values():
        view = LeaseView(row.message_id, row.state, row.lease_owner, row.lease_token, row.attempt_count)
        events = claim_events(view, owner=owner, lease_token=new_token(), now=now, policy=policy)
        batches.append((email_stream(row.message_id), row.stream_version, events))
    append_and_fold(connection, batches, {"actor": owner}, loaded={OUTBOX.name: due})
    return [Claim(row) for row in due.values()]


def record_outcomes(
    connection: Connection, outcomes: Sequence[tuple[Claim, Sequence[object]]], *, owner: str
) -> set[UUID]:
    """Append each message's outcome whose lease still stands, all in one statement; the ids recorded.

    The row locks make this the only writer of these messages for the
    moment; the lease token tells whether a message is still ours. An expired
    lease nobody claimed yet is still ours: the send happened, record it.
    """
    current = OUTBOX.load(connection, [claim.row.message_id for claim, _ in outcomes])
    ours = [
        (row, events)
        for claim, events in outcomes
        if (row := current.get(claim.row.message_id)) is not None
        and row.state == "leased" and row.lease_token == claim.lease_token
    ]
    if not ours:
        return set()
    append_and_fold(connection, [(email_stream(row.message_id), row.stream_version, events) for row, events in ours],
                    {"actor": owner}, loaded={OUTBOX.name: {row.message_id: row for row, _ in ours}})
    return {row.message_id for row, _ in ours}


def record_outcome(connection: Connection, claim: Claim, events: Sequence[object], *, owner: str) -> bool:
    """``record_outcomes`` for one message: False when its lease was taken over."""
    return claim.row.message_id in record_outcomes(connection, [(claim, events)], owner=owner)


def still_held(connection: Connection, claims: Sequence[Claim]) -> list[Claim]:
    """The claims whose lease still stands: the same lease-token fence an outcome passes, without locking."""
    rows = {row.message_id: row for row in connection.execute(LEASES_OF, {"ids": [c.row.message_id for c in claims]})}
    return [
        claim for claim in claims
        if (row := rows.get(claim.row.message_id)) is not None
        and row.state == "leased" and row.lease_token == claim.lease_token
    ]


def next_due(connection: Connection) -> datetime | None:
    return connection.execute(NEXT_DUE).scalar()
