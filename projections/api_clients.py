"""The ``api_clients`` read model: which key hash authenticates which client, and whether it may.

One row per client name; a registration after a revocation replaces the row,
so only the newest key of a name can ever authenticate.
"""

from __future__ import annotations

from datetime import datetime

from attrs import evolve, frozen

from domain.clients import ClientRegistered, ClientRevoked


@frozen
class ApiClientRow:
    name: str
    key_hash: str
    status: str  # "active" or "revoked"
    created_at: datetime
    revoked_at: datetime | None = None


def api_client_key(event: object) -> str | None:
    """Which row an event touches, if any."""
    if isinstance(event, ClientRegistered | ClientRevoked):
        return event.name
    return None


def evolve_api_client(row: ApiClientRow | None, event: object) -> ApiClientRow | None:
    match event:
        case ClientRegistered():
            return ApiClientRow(event.name, event.key_hash, "active", event.created_at)
        case ClientRevoked() if row is not None:
            return evolve(row, status="revoked", revoked_at=event.revoked_at)
    return row
