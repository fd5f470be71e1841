"""The ``api_keys`` read model: one row per API key, which client and tenant it serves and what it may do.

A presented key is authenticated by the SHA-256 of its value (``key_hash``,
unique). Revoked keys keep their row, with the time they were revoked, so
``clients list`` shows every key a client ever held.

Keys of clients registered before tenants and scopes (``ClientRegistered``)
belong to the default tenant with ``LEGACY_SCOPES``. Such a client held one
key at a time, under the id ``legacy:<name>``: registering it again after a
revocation replaced that row, as the read model of that time did (the log
keeps every registration).
"""

from __future__ import annotations

from datetime import datetime

from attrs import evolve, frozen

from domain.clients import (
    LEGACY_SCOPES,
    ClientKeyIssued,
    ClientKeyRevoked,
    ClientRegistered,
    ClientRevoked,
    legacy_key_id,
    ordered_scopes,
)
from domain.tenants import DEFAULT_TENANT


@frozen
class ApiKeyRow:
    key_id: str
    key_hash: str
    client: str
    tenant: str
    scopes: str  # space-separated, in the order of domain.clients.SCOPES
    status: str  # "active" or "revoked"
    created_at: datetime
    revoked_at: datetime | None = None

    @property
    def scope_set(self) -> frozenset[str]:
        return frozenset(self.scopes.split())


def api_key_key(event: object) -> str | None:
    """Which row an event touches, if any."""
    match event:
        case ClientKeyIssued() | ClientKeyRevoked():
            return event.key_id
        case ClientRegistered() | ClientRevoked():
            return legacy_key_id(event.name)
    return None


def evolve_api_key(row: ApiKeyRow | None, event: object) -> ApiKeyRow | None:
    match event:
        case ClientKeyIssued():
            return ApiKeyRow(event.key_id, event.key_hash, event.name, event.tenant, " ".join(event.scopes),
                             "active", event.issued_at)
        case ClientRegistered():
            return ApiKeyRow(legacy_key_id(event.name), event.key_hash, event.name, DEFAULT_TENANT,
                             " ".join(ordered_scopes(LEGACY_SCOPES)), "active", event.created_at)
        case ClientKeyRevoked() if row is not None:
            return evolve(row, status="revoked", revoked_at=event.revoked_at)
        case ClientRevoked() if row is not None and row.status == "active":
            return evolve(row, status="revoked", revoked_at=event.revoked_at)
    return row
