"""The suppression list of a tenant: addresses that bounced for good or whose owner complained.

A permanent bounce or a complaint (``domain.feedback``) adds the recipient's
keyed hash to the list (``AddressSuppressed``, on the bouncing email's
stream); a create to an address on the list is refused with
``RecipientSuppressed`` and sends nothing. An admin lifts a suppression with
a reason (``SuppressionLifted``, on the user's ``suppression:`` stream).

Each entry belongs to the user whose email bounced: its hash is sealed under
that user's data key like the address itself, and their erasure removes the
entry (projections/suppressions.py). No address is kept, only hashes.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from attrs import frozen

from domain.input_checks import operator_reason

SUPPRESSION_REASONS = ("bounce", "complaint")


def suppression_stream(user_id: str) -> str:
    """The stream of a (scoped) user's lifted suppressions."""
    return f"suppression:{user_id}"


@frozen
class AddressSuppressed:
    user_id: str  # scoped: the user whose email bounced or was complained about
    message_id: UUID
    address_hmac: str  # "<key id>:<hex HMAC>" of the recipient (infra/services/address_index.py); sealed
    reason: str  # "bounce" or "complaint"
    suppressed_at: datetime


@frozen
class SuppressionLifted:
    user_id: str
    address_hmac: str  # the hash lifted, as it was suppressed; sealed
    actor: str
    reason: str
    lifted_at: datetime


def lift_reason(reason: object) -> str:
    """Why a suppression is lifted, trimmed; ``InvalidInput`` unless it is one short line without an address."""
    return operator_reason(reason, blank="lifting a suppression needs a reason (--reason): say why, e.g. the "
                                         "ticket in which the user confirmed the address",
                           instead="name the ticket instead")


def decide_lift(user_id: str, hashes: list[str], *, actor: str, reason: str, now: datetime) -> list[SuppressionLifted]:
    """One ``SuppressionLifted`` per suppressed hash of ``user_id`` that the lifted address has."""
    return [SuppressionLifted(user_id, address_hash, actor, reason, now) for address_hash in sorted(hashes)]
