"""The ``address_index`` read model: per user, the keyed hashes of the addresses their requests went to.

One row per (scoped) user; ``hashes`` holds the distinct ``"<key id>:<hex
HMAC>"`` values of their reset and OTP requests, space-separated, sorted.
No address, only hashes (infra/services/address_index.py). A hash that reads
``[erased]`` (the user's key is gone) is not indexed, and ``SubjectErased``
empties the row, so the live table and a replay of the log agree that an
erased user cannot be found by address.
"""

from __future__ import annotations

import re

from attrs import frozen

from domain.otp_events import OtpChallengeIssued
from domain.privacy import SubjectErased
from domain.reset_events import ResetRequested
from domain.tenants import tenant_of

# Anything else (None on old events, "[erased]") is not a hash to index.
HASH_SHAPE = re.compile(r"[^\s:]+:[0-9a-f]{64}")


@frozen
class AddressIndexRow:
    user_id: str  # scoped
    tenant: str
    hashes: str  # space-separated, sorted, distinct; "" once erased


def address_index_key(event: object) -> str | None:
    """Which row an event touches, if any."""
    if isinstance(event, ResetRequested | OtpChallengeIssued | SubjectErased):
        return event.user_id
    return None


def evolve_address_index(row: AddressIndexRow | None, event: object) -> AddressIndexRow | None:
    match event:
        case SubjectErased():
            return AddressIndexRow(event.user_id, tenant_of(event.user_id), "")
        case ResetRequested() | OtpChallengeIssued() if isinstance(event.address_hmac, str) and HASH_SHAPE.fullmatch(
            event.address_hmac
        ):
            known = set(row.hashes.split()) if row is not None else set()
            if event.address_hmac in known:
                return row
            hashes = " ".join(sorted(known | {event.address_hmac}))
            return AddressIndexRow(event.user_id, tenant_of(event.user_id), hashes)
    return row
