"""Inline projections: folded into their tables in the same transaction as the append.

Each projection is a pure fold from ``projections/`` plus the table it lives
in. ``apply_inline`` loads the rows an append touches (locked), folds the new
events into them and writes them back, so a read model can never disagree
with the log it came from.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs
from attrs import frozen
from sqlalchemy import Connection, Table, bindparam, select
from sqlalchemy.dialects.postgresql import insert

from domain import email
from domain.log import RecordedEvent
from infra.db import tables
from projections.api_clients import ApiClientRow, api_client_key, evolve_api_client
from projections.otp_challenges import OtpChallengeRow, evolve_otp_challenge, otp_challenge_key
from projections.outbox import OutboxRow, evolve_outbox
from projections.receipts import ReceiptRow, evolve_receipt, receipt_key
from projections.reset_tokens import ResetTokenRow, evolve_reset_token, reset_token_key

EMAIL_EVENTS = (
    email.EmailQueued, email.LeaseClaimed, email.LeaseExpired, email.LeaseReleased, email.SendAttemptFailed,
    email.ProviderAccepted, email.DeliverySkipped, email.DeliveryAbandoned,
)


def _email_key(event: object) -> Any:
    return event.message_id if isinstance(event, EMAIL_EVENTS) else None


@frozen
class InlineProjection:
    name: str
    table: Table
    row_type: type
    key_column: str
    key_of: Callable[[object], Any]
    evolve: Callable[[Any, object], Any]

    def load(self, connection: Connection, keys: Iterable[Any], *, lock: bool = True) -> dict[Any, Any]:
        query = _select_by_keys(self.table, self.key_column, lock)
        rows = connection.execute(query, {"keys": list(keys)})
        return {row._mapping[self.key_column]: self.row_type(**row._mapping) for row in rows}

    def save(self, connection: Connection, rows: Sequence[Any]) -> None:
        if rows:
            values = [attrs.asdict(row, recurse=False) for row in rows]
            connection.execute(_upsert(self.table, self.key_column), values if len(values) > 1 else values[0])


# Built once per table: constructing an upsert of every column on each call
# cost the delivery hot path more CPU than the database work it describes.
@functools.cache
def _upsert(table: Table, key_column: str) -> Any:
    statement = insert(table)
    updates = {c.name: statement.excluded[c.name] for c in table.c if c.name != key_column}
    return statement.on_conflict_do_update(index_elements=[key_column], set_=updates)


@functools.cache
def _select_by_keys(table: Table, key_column: str, lock: bool) -> Any:
    query = select(table).where(table.c[key_column].in_(bindparam("keys", expanding=True)))
    return query.with_for_update() if lock else query


OUTBOX = InlineProjection("email_outbox", tables.email_outbox, OutboxRow, "message_id", _email_key, evolve_outbox)
RESET_TOKENS = InlineProjection(
    "reset_tokens", tables.reset_tokens, ResetTokenRow, "request_id", reset_token_key, evolve_reset_token
)
OTP_CHALLENGES = InlineProjection(
    "otp_challenges", tables.otp_challenges, OtpChallengeRow, "challenge_id", otp_challenge_key,
    evolve_otp_challenge,
)
RECEIPTS = InlineProjection("receipts", tables.receipts, ReceiptRow, "receipt_id", receipt_key, evolve_receipt)
API_CLIENTS = InlineProjection(
    "api_clients", tables.api_clients, ApiClientRow, "name", api_client_key, evolve_api_client
)
INLINE: list[InlineProjection] = [OUTBOX, RESET_TOKENS, OTP_CHALLENGES, RECEIPTS, API_CLIENTS]


def apply_inline(connection: Connection, recorded: Sequence[RecordedEvent]) -> None:
    """Fold freshly appended events into every inline projection they touch."""
    for projection in INLINE:
        touched = [(projection.key_of(r.event), r.event) for r in recorded]
        touched = [(key, event) for key, event in touched if key is not None]
        if not touched:
            continue
        rows = projection.load(connection, {key for key, _ in touched})
        changed = {}
        for key, event in touched:
            row = projection.evolve(rows.get(key), event)
            if row is not None:
                rows[key] = changed[key] = row
        projection.save(connection, list(changed.values()))
