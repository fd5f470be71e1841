"""API clients: create (the key is shown once), list, revoke, and authenticate a presented key.

Registrations and revocations are events on ``client:<name>``, folded inline
into ``api_clients``; a request is authenticated by looking up the SHA-256 of
its key there, so a revocation takes effect on the next request.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from attrs import frozen
from sqlalchemy import Engine, select

from domain.clients import (
    LEGACY_SCOPES,
    Caller,
    check_client_name,
    client_stream,
    decide_register,
    decide_revoke,
    fold_client,
)
from domain.tenants import DEFAULT_TENANT
from domain.tokens import hash_token
from infra.db import tables
from infra.services.unit_of_work import ServiceContext, decide_events_on_stream
from projections.api_clients import ApiClientRow

KEY_PREFIX = "alk_"  # lets secret scanners recognise a leaked key


def new_api_key() -> str:
    """A fresh key: the prefix and 256 random bits in base64url (43 characters)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


@frozen
class CreatedClient:
    name: str
    api_key: str  # shown once, never stored


def create_client(ctx: ServiceContext, name: str, metadata: Mapping[str, Any] | None = None) -> CreatedClient:
    """Register a client and return its key; ``InvalidInput`` for a bad or taken name.

    Needs no token keys: clients can be managed before the service is configured.
    """
    check_client_name(name)
    api_key = new_api_key()
    decide_events_on_stream(ctx, client_stream(name), fold_client,
                            lambda state, now: decide_register(state, name, hash_token(api_key), now=now), metadata)
    return CreatedClient(name, api_key)


def revoke_client(ctx: ServiceContext, name: str, metadata: Mapping[str, Any] | None = None) -> bool:
    """Revoke a client's key; False when it was already revoked, ``NotFound`` when it never existed."""
    return bool(decide_events_on_stream(ctx, client_stream(name), fold_client,
                                        lambda state, now: decide_revoke(state, name, now=now), metadata))


def list_clients(engine: Engine) -> list[ApiClientRow]:
    query = select(tables.api_clients).order_by(tables.api_clients.c.name)
    with engine.connect() as connection:
        return [ApiClientRow(**row._mapping) for row in connection.execute(query)]


def authenticate(engine: Engine, api_key: str) -> Caller | None:
    """Who holds ``api_key`` (client, tenant, scopes) while it is active, or None."""
    c = tables.api_clients.c
    query = select(c.name).where(c.key_hash == hash_token(api_key), c.status == "active")
    with engine.connect() as connection:
        name = connection.execute(query).scalar()
    return None if name is None else Caller(name, DEFAULT_TENANT, LEGACY_SCOPES)
