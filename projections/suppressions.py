"""The ``suppressions`` read model: per user, the keyed hashes of their addresses that take no more mail.

One row per (scoped) user whose email bounced for good or was complained
about; ``hashes`` holds the suppressed ``"<key id>:<hex HMAC>"`` values,
space-separated, sorted (``domain.suppression``). A create looks its
recipient's hashes up here (infra/services/suppressions.py). A lifted hash
leaves the row; a row with no hash left suppresses nothing. A hash that
reads ``[erased]`` (the user's key is gone) is not kept, and
``SubjectErased`` empties the row: the live table and a replay of the log
agree that nothing of an erased user's addresses is left here.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from attrs import frozen

from domain.privacy import SubjectErased
from domain.suppression import AddressSuppressed, SuppressionLifted
from domain.tenants import tenant_of
from projections.address_index import HASH_SHAPE


@frozen
class SuppressionRow:
    user_id: str  # scoped
    tenant: str
    hashes: str  # space-separated, sorted, distinct; "" once lifted or erased
    reason: str | None  # of the latest suppression: "bounce" or "complaint"
    message_id: UUID | None  # the email whose bounce or complaint suppressed last
    suppressed_at: datetime | None


def suppression_key(event: object) -> str | None:
    """Which row an event touches, if any."""
    if isinstance(event, AddressSuppressed | SuppressionLifted | SubjectErased):
        return event.user_id
    return None


def evolve_suppression(row: SuppressionRow | None, event: object) -> SuppressionRow | None:
    known = set(row.hashes.split()) if row is not None else set()
    match event:
        case SubjectErased() if row is not None:
            return _emptied(event.user_id)
        case AddressSuppressed() if HASH_SHAPE.fullmatch(event.address_hmac):
            return SuppressionRow(event.user_id, tenant_of(event.user_id),
                                  " ".join(sorted(known | {event.address_hmac})), event.reason, event.message_id,
                                  event.suppressed_at)
        case AddressSuppressed() if row is None:
            # Read again after an erasure, the hash is "[erased]": the row the live table emptied then.
            return _emptied(event.user_id)
        case SuppressionLifted() if row is not None and event.address_hmac in known:
            left = " ".join(sorted(known - {event.address_hmac}))
            return (SuppressionRow(row.user_id, row.tenant, left, row.reason, row.message_id, row.suppressed_at)
                    if left else _emptied(row.user_id))
    return row


def _emptied(user_id: str) -> SuppressionRow:
    return SuppressionRow(user_id, tenant_of(user_id), "", None, None, None)
