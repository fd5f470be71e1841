"""API clients: the applications allowed to call authledger, one ``client:<name>`` stream each.

A client is registered with the SHA-256 of its API key (never the key) and
may be revoked; both are events, so the audit trail says which application
could call the service when. A revoked name may be registered again with a
new key: the stream keeps both lives.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

from attrs import frozen

from domain.decisions import require_utc
from domain.errors import InvalidInput, NotFound, UnknownEventType

CLIENT_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")

# What a key may do. Each HTTP operation needs exactly one of these.
SCOPES = ("send", "verify", "review", "admin", "metrics")
# A client registered before scopes existed could create, verify and read
# timelines (what the API offered then), and keeps exactly that.
LEGACY_SCOPES = frozenset({"send", "verify", "review"})


@frozen
class Caller:
    """Who presented a key: the client, the tenant it belongs to, and what its key may do."""

    client: str
    tenant: str
    scopes: frozenset[str]

    def may(self, scope: str) -> bool:
        return scope in self.scopes


def client_stream(name: str) -> str:
    """The stream id holding this client's registrations and revocations."""
    return f"client:{name}"


@frozen
class ClientRegistered:
    name: str
    key_hash: str  # hex SHA-256 of the API key; the key itself is shown once and never stored
    created_at: datetime


@frozen
class ClientRevoked:
    name: str
    revoked_at: datetime


@frozen
class ClientState:
    """Where one client stands: never registered, active, or revoked."""

    name: str | None = None
    key_hash: str | None = None
    active: bool = False


def evolve_client(state: ClientState, event: object) -> ClientState:
    if isinstance(event, ClientRegistered):
        return ClientState(event.name, event.key_hash, active=True)
    if isinstance(event, ClientRevoked):
        return ClientState(state.name, state.key_hash, active=False)
    raise UnknownEventType(f"{type(event).__name__} is not an event of a client stream")


def fold_client(events: Iterable[object]) -> ClientState:
    state = ClientState()
    for event in events:
        state = evolve_client(state, event)
    return state


def check_client_name(name: object) -> str:
    """The name, or ``InvalidInput`` unless it is 1-63 of a-z, 0-9, '.', '_', '-' (starting alphanumeric)."""
    if not isinstance(name, str) or not CLIENT_NAME.fullmatch(name):
        raise InvalidInput(
            "a client name is 1-63 characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit"
        )
    return name


def decide_register(state: ClientState, name: str, key_hash: str, *, now: datetime) -> list[object]:
    """Register ``name`` with a key hash; ``InvalidInput`` while a client of that name is active."""
    require_utc(now)
    check_client_name(name)
    if state.active:
        raise InvalidInput(f"a client named {name!r} already exists; revoke it first to issue a new key")
    return [ClientRegistered(name, key_hash, now)]


def decide_revoke(state: ClientState, name: str, *, now: datetime) -> list[object]:
    """Revoke ``name``: nothing to do when it is already revoked, ``NotFound`` when it never existed."""
    require_utc(now)
    if state.name is None:
        raise NotFound(f"no client named {name!r}")
    return [ClientRevoked(name, now)] if state.active else []
