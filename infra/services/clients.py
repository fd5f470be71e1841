"""API clients: create (the key is shown once), rotate, list, revoke, and authenticate a presented key.

A client is named within its tenant (``client_stream``: two tenants may each
have a client ``web``). Its keys are issued and revoked by events on its
stream, folded inline into ``api_keys``; a request is authenticated by looking up the
SHA-256 of its key there (``authenticate``; ``authenticate_hash`` when only
that hash is kept, as by a console session). The answer is cached in the process for at most
``KEY_CACHE_SECONDS`` per key, so the API does not read the database for the
key on every request; a revocation therefore takes effect within that time
everywhere (at once in the process that revokes).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from attrs import frozen
from sqlalchemy import Engine, select

from domain.clients import (
    LEGACY_SCOPES,
    ClientKeyIssued,
    Caller,
    check_client_name,
    check_scopes,
    client_stream,
    decide_create,
    decide_revoke,
    decide_rotate,
    fold_client,
    legacy_stream_serves,
    ordered_scopes,
)
from domain.errors import InvalidInput
from domain.tenants import DEFAULT_TENANT, check_tenant_name
from domain.tokens import hash_token
from infra.db import tables
from infra.db.identity import database_identity
from infra.db.reading import reading
from infra.services.tenants import require_tenant
from infra.services.unit_of_work import ServiceContext, decide_events_on_stream, load_state
from projections.api_keys import ApiKeyRow

KEY_PREFIX = "alk_"  # lets secret scanners recognise a leaked key
KEY_CACHE_SECONDS = 1.0
KEY_CACHE_ENTRIES = 10_000  # a flood of made-up keys cannot grow the cache without bound


def new_api_key() -> str:
    """A fresh key: the prefix and 256 random bits in base64url (43 characters)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


class KeyCache:
    """Who holds a key hash, remembered for at most ``seconds`` (unknown keys too), per database.

    ``clock`` is a monotonic clock in seconds; tests pass one they move by hand.
    """

    def __init__(self, *, seconds: float = KEY_CACHE_SECONDS, entries: int = KEY_CACHE_ENTRIES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds, self.entries, self.clock = seconds, entries, clock
        self._found: OrderedDict[tuple[str, str], tuple[float, Caller | None]] = OrderedDict()
        self._lock = threading.Lock()

    def authenticate(self, engine: Engine, api_key: str) -> Caller | None:
        return self.authenticate_hash(engine, hash_token(api_key))

    def authenticate_hash(self, engine: Engine, key_hash: str) -> Caller | None:
        """Who holds the key whose ``hash_token`` is ``key_hash``, while it is active, or None."""
        entry = (database_identity(engine), key_hash)
        now = self.clock()
        with self._lock:
            cached = self._found.get(entry)
            if cached is not None and now - cached[0] < self.seconds:
                return cached[1]
        caller = _caller_of(engine, entry[1])
        with self._lock:
            self._found[entry] = (now, caller)
            self._found.move_to_end(entry)
            while len(self._found) > self.entries:
                self._found.popitem(last=False)
        return caller

    def clear(self) -> None:
        with self._lock:
            self._found.clear()


KEYS = KeyCache()


def _caller_of(engine: Engine, key_hash: str) -> Caller | None:
    c = tables.api_keys.c
    query = select(c.client, c.tenant, c.scopes, c.key_id).where(c.key_hash == key_hash, c.status == "active")
    with reading(engine) as connection:
        row = connection.execute(query).one_or_none()
    return None if row is None else Caller(row.client, row.tenant, frozenset(row.scopes.split()), row.key_id)


def authenticate(engine: Engine, api_key: str) -> Caller | None:
    """Who holds ``api_key`` (client, tenant, scopes) while it is active, or None; cached up to a second."""
    return KEYS.authenticate(engine, api_key)


def authenticate_hash(engine: Engine, key_hash: str) -> Caller | None:
    """``authenticate`` for a key known only by its ``hash_token`` (as a console session keeps it)."""
    return KEYS.authenticate_hash(engine, key_hash)


@frozen
class IssuedKey:
    name: str
    tenant: str
    scopes: tuple[str, ...]
    key_id: str
    api_key: str  # shown once, never stored


def _issued(events: list[ClientKeyIssued], api_key: str) -> IssuedKey:
    [issued] = events
    return IssuedKey(issued.name, issued.tenant, issued.scopes, issued.key_id, api_key)


def stream_of(ctx: ServiceContext, name: str, tenant: str) -> str:
    """The stream holding ``tenant``'s client ``name``, or where it would be created.

    ``client:<name>`` when it holds that tenant's client (the default
    tenant's, or another's created before names were per tenant); otherwise
    the tenant's own ``client:<tenant>/<name>``. Which one never changes once
    decided: no other tenant's client is ever created in ``client:<name>`` now.
    """
    legacy = client_stream(name)
    return legacy if legacy_stream_serves(load_state(ctx, legacy, fold_client), tenant) else client_stream(name, tenant)


def create_client(
    ctx: ServiceContext, name: str, metadata: Mapping[str, Any] | None = None, *,
    tenant: str = DEFAULT_TENANT, scopes: Iterable[str] = ordered_scopes(LEGACY_SCOPES),
    granter: Caller | None = None,
) -> IssuedKey:
    """Create a client of ``tenant`` with ``scopes`` and return its first key.

    ``InvalidInput`` for a bad or taken name (in ``tenant``), an unknown scope
    or none, or a tenant that was never created; ``Forbidden`` when
    ``granter`` (the key asking over HTTP; None for the CLI) may not grant
    ``scopes``. Needs no token keys: clients can be managed before the
    service is configured.
    """
    check_client_name(name)
    check_tenant_name(tenant)
    scopes = check_scopes(scopes)
    require_tenant(ctx.engine, tenant)
    api_key = new_api_key()
    events = decide_events_on_stream(
        ctx, stream_of(ctx, name, tenant), fold_client,
        lambda state, now: decide_create(state, name, tenant=tenant, scopes=scopes, key_hash=hash_token(api_key),
                                         now=now, granter=granter), metadata)
    KEYS.clear()
    return _issued(events, api_key)


def rotate_client(ctx: ServiceContext, name: str, metadata: Mapping[str, Any] | None = None, *,
                  tenant: str = DEFAULT_TENANT, granter: Caller | None = None) -> IssuedKey:
    """Issue another live key to ``tenant``'s client ``name``; its other keys stay live until revoked.

    ``Forbidden`` when ``granter`` (a key; None for the CLI) lacks one of the client's scopes.
    """
    check_client_name(name)
    check_tenant_name(tenant)
    api_key = new_api_key()
    events = decide_events_on_stream(
        ctx, stream_of(ctx, name, tenant), fold_client,
        lambda state, now: decide_rotate(_of_tenant(state, tenant), name, key_hash=hash_token(api_key), now=now,
                                         granter=granter),
        metadata)
    KEYS.clear()
    return _issued(events, api_key)


def revoke_client(ctx: ServiceContext, name: str, metadata: Mapping[str, Any] | None = None, *,
                  key_id: str | None = None, tenant: str = DEFAULT_TENANT, revoker: Caller | None = None
                  ) -> list[str]:
    """Revoke one key or all of ``tenant``'s client ``name``; the key ids revoked now (none: already revoked).

    ``NotFound`` for an unknown client or key; ``Forbidden`` for an operator
    client when ``revoker`` (a key; None for the CLI) asks.
    """
    check_client_name(name)
    check_tenant_name(tenant)
    if key_id is not None and (not isinstance(key_id, str) or not key_id or len(key_id) > 200):
        raise InvalidInput("a key id is 1-200 characters, as `clients list` shows it")
    events = decide_events_on_stream(
        ctx, stream_of(ctx, name, tenant), fold_client,
        lambda state, now: decide_revoke(_of_tenant(state, tenant), name, key_id, now=now, revoker=revoker),
        metadata)
    KEYS.clear()
    return [event.key_id for event in events]


def _of_tenant(state: Any, tenant: str) -> Any:
    """The state, or that of a client never created when it belongs to another tenant than ``tenant``."""
    return state if state.name is None or state.tenant == tenant else type(state)()


def list_keys(engine: Engine, *, tenant: str | None = None) -> list[ApiKeyRow]:
    """Every key, live or revoked, by client then creation; only ``tenant``'s when given."""
    c = tables.api_keys.c
    query = select(tables.api_keys).order_by(c.client, c.tenant, c.created_at, c.key_id)
    if tenant is not None:
        query = query.where(c.tenant == tenant)
    with engine.connect() as connection:
        return [ApiKeyRow(**row._mapping) for row in connection.execute(query)]


def key_json(row: ApiKeyRow) -> dict[str, Any]:
    """A key as the CLI and the API list it: never the key nor its hash."""
    return {"key_id": row.key_id, "client": row.client, "tenant": row.tenant, "scopes": row.scopes.split(),
            "status": row.status, "created_at": row.created_at.isoformat(),
            "revoked_at": row.revoked_at.isoformat() if row.revoked_at else None}
