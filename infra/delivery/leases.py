"""The lease queries on ``email_outbox``: claim due messages, record outcomes fenced by lease token.

Both write through the unit of work, one statement each for a whole batch:
the statement appends the events and updates the outbox rows together, so
the rows always equal the pure ``evolve_outbox`` fold a replay computes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from uuid import UUID, uuid4

from attrs import fields, frozen
from sqlalchemy import Connection, text

from domain.delivery import DeliveryPolicy
from infra.services.unit_of_work import claim_leases, record_fenced
from projections.outbox import OutboxRow, evolve_outbox

_ROW_FIELDS = [field.name for field in fields(OutboxRow)]

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
    """Lease up to ``limit`` due messages to ``owner`` in one round trip; the caller commits.

    Due: pending and available, or leased with a lease that ran out (a
    leased row's available_at is its lease expiry). The unit of work's
    set-based claim appends ``LeaseExpired``/``LeaseClaimed`` as
    ``claim_events`` decides them and folds them into the rows.
    """
    tokens = [new_token() for _ in range(limit)]
    claimed = claim_leases(connection, owner=owner, limit=limit, now=now, lease_expires_at=now + policy.lease,
                           tokens=tokens)
    return [Claim(OutboxRow(**{name: row._mapping[name] for name in _ROW_FIELDS})) for row in claimed]


def record_outcomes(
    connection: Connection, outcomes: Sequence[tuple[Claim, Sequence[object]]], *, owner: str
) -> set[UUID]:
    """Append each message's outcome whose lease still stands, all in one statement; the ids recorded.

    Each outcome is folded (``evolve_outbox``, as a replay does) onto the row
    as claimed; the statement writes it only while the row is still leased
    under the claim's token at the claimed version, so a lease taken over
    records nothing. An expired lease nobody claimed yet is still ours: the
    send happened, record it.
    """
    folded = []
    for claim, events in outcomes:
        row: OutboxRow | None = claim.row
        for event in events:
            row = evolve_outbox(row, event)
        folded.append((row, claim.lease_token, claim.row.stream_version, events))
    return record_fenced(connection, folded, owner=owner)


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
