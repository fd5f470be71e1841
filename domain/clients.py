"""API clients: the applications allowed to call authledger, one ``client:`` stream each.

A client belongs to one tenant, and its name is unique within that tenant
only: two tenants may each have a client ``web`` (``client_stream``). It
holds scopes, and it may hold several live keys at once, so that a key can
be rotated with overlap: issue a new key, move the application to it, then
revoke the old one. A key is recorded only as the SHA-256 of its value
(shown once) and a key id derived from that hash, so the audit trail says
which key could call the service when.

Clients registered before tenants and scopes (``ClientRegistered``,
``ClientRevoked``: one key per client at a time) still fold: they belong to
the default tenant and hold ``LEGACY_SCOPES``. Their one key's id is
``legacy:<name>``; a legacy revocation names no key, and there was only ever
one live.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from datetime import datetime

from attrs import evolve, frozen

from domain.input_checks import require_utc
from domain.errors import Forbidden, InvalidInput, NotFound, UnknownEventType
from domain.tenants import DEFAULT_TENANT

CLIENT_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")

# What a key may do. Each HTTP operation needs one of these.
# ``provider-events``: report what a provider said about an email (POST /v1/providers/generic/events).
SCOPES = ("send", "verify", "review", "admin", "metrics", "provider-events", "operator")
# The deployment's own view (/metrics across every tenant: the process, the
# pool, the queue as a whole). Only the operator at the machine (the CLI)
# grants it: a tenant's admin key never can, nor can it rotate a key that
# holds it, so no tenant can read what another tenant's traffic does.
OPERATOR = "operator"
# What an admin key may grant over HTTP, at most (and only those it holds).
TENANT_SCOPES = tuple(scope for scope in SCOPES if scope != OPERATOR)
# A client registered before scopes existed could create, verify and read
# timelines (what the API offered then), and keeps exactly that.
LEGACY_SCOPES = frozenset({"send", "verify", "review"})


@frozen
class Caller:
    """Who presented a key: the client, the tenant it belongs to, what its key may do, and the key's id."""

    client: str
    tenant: str
    scopes: frozenset[str]
    key_id: str = ""  # the public id of the key presented (never the key nor its hash)

    def may(self, scope: str) -> bool:
        return scope in self.scopes


def client_stream(name: str, tenant: str | None = None) -> str:
    """A stream that may hold a client's keys: the shared ``client:<name>``, or ``client:<tenant>/<name>``.

    The default tenant's clients live in ``client:<name>``, as every client
    did before names were per tenant, so a database from before needs no
    change; other tenants' new clients live in their own. A '/' can occur in
    neither a tenant nor a client name, so no two (tenant, name) pairs share a
    stream. Which of the two holds a given client: ``legacy_stream_serves``.
    """
    return f"client:{name}" if tenant is None else f"client:{tenant}/{name}"


def legacy_stream_serves(state: ClientState, tenant: str) -> bool:
    """Whether ``client:<name>``, folded to ``state``, holds ``tenant``'s client of that name.

    It does when it is that tenant's client (the default tenant's, or
    another's created before names were per tenant), and when it was never
    created and ``tenant`` is the default tenant (whose clients it holds now).
    Otherwise the client lives in ``client_stream(name, tenant)``: another
    tenant's new client, or a default tenant's client whose name another
    tenant took before names were per tenant.
    """
    if state.name is None:
        return tenant == DEFAULT_TENANT
    return state.tenant == tenant


def key_id_of(key_hash: str) -> str:
    """A key's public id: derived from its hash (one way), so it names the key without revealing the hash."""
    return "key_" + hashlib.sha256(key_hash.encode("ascii")).hexdigest()[:16]


def legacy_key_id(name: str) -> str:
    """The id of the one key of a client registered before several keys existed."""
    return f"legacy:{name}"


def ordered_scopes(scopes: Iterable[str]) -> tuple[str, ...]:
    """Scopes in the order of ``SCOPES``, each once."""
    given = set(scopes)
    return tuple(scope for scope in SCOPES if scope in given)


def check_grant(scopes: Iterable[str], granter: Caller | None) -> None:
    """``Forbidden`` unless ``granter`` may issue a key with ``scopes``; None is the operator at the CLI, who may.

    A key may only create (or rotate) keys whose scopes it holds itself, so an
    admin key of a tenant cannot mint a scope it was not given; and the
    ``operator`` scope is the CLI's alone, whoever asks over HTTP.
    """
    if granter is None:
        return
    given = set(scopes)
    if OPERATOR in given:
        raise Forbidden("the 'operator' scope is granted only by `authledger clients` at the server, never over HTTP")
    lacking = ordered_scopes(given - granter.scopes)
    if lacking:
        raise Forbidden("this API key may only grant scopes it holds itself, and it lacks "
                        + ", ".join(map(repr, lacking)))


@frozen
class ClientRegistered:
    """Legacy (before tenants and scopes): the client's one key, in the default tenant."""

    name: str
    key_hash: str  # hex SHA-256 of the API key; the key itself is shown once and never stored
    created_at: datetime


@frozen
class ClientRevoked:
    """Legacy: the client's one live key was revoked."""

    name: str
    revoked_at: datetime


@frozen
class ClientKeyIssued:
    """A key for ``name`` of ``tenant`` with ``scopes``: the client's first (creation) or another (rotation)."""

    name: str
    tenant: str
    scopes: tuple[str, ...]
    key_id: str
    key_hash: str  # hex SHA-256 of the API key, shown once and never stored
    issued_at: datetime


@frozen
class ClientKeyRevoked:
    name: str
    key_id: str
    revoked_at: datetime


CLIENT_EVENTS = (ClientRegistered, ClientRevoked, ClientKeyIssued, ClientKeyRevoked)


@frozen
class ClientState:
    """Where one client stands: never created, its tenant and scopes, every key id and the live ones."""

    name: str | None = None
    tenant: str = DEFAULT_TENANT
    scopes: tuple[str, ...] = ordered_scopes(LEGACY_SCOPES)
    keys: tuple[str, ...] = ()
    live: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        return bool(self.live)


def evolve_client(state: ClientState, event: object) -> ClientState:
    match event:
        case ClientRegistered():
            key_id = legacy_key_id(event.name)
            keys = state.keys if key_id in state.keys else (*state.keys, key_id)
            return ClientState(event.name, DEFAULT_TENANT, ordered_scopes(LEGACY_SCOPES), keys, (key_id,))
        case ClientRevoked():
            return evolve(state, live=())
        case ClientKeyIssued():
            return ClientState(event.name, event.tenant, event.scopes, (*state.keys, event.key_id),
                               (*state.live, event.key_id))
        case ClientKeyRevoked():
            return evolve(state, live=tuple(k for k in state.live if k != event.key_id))
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


def check_scopes(scopes: object) -> tuple[str, ...]:
    """The scopes in their usual order; ``InvalidInput`` for none, or one that is not in ``SCOPES``."""
    if isinstance(scopes, str) or not isinstance(scopes, Iterable):
        raise InvalidInput(f"scopes are a list of: {', '.join(SCOPES)}")
    given = list(scopes)
    unknown = [s for s in given if s not in SCOPES]
    if unknown:
        raise InvalidInput(f"unknown scope {str(unknown[0])[:40]!r}; scopes are: {', '.join(SCOPES)}")
    if not given:
        raise InvalidInput(f"a client needs at least one scope of: {', '.join(SCOPES)}")
    return ordered_scopes(given)


def decide_create(
    state: ClientState, name: str, *, tenant: str, scopes: tuple[str, ...], key_hash: str, now: datetime,
    granter: Caller | None = None,
) -> list[ClientKeyIssued]:
    """The client's first key; ``InvalidInput`` while the client has a live key (rotate it instead).

    A client whose keys are all revoked may be created again in its tenant,
    with any scopes ``granter`` may grant (``check_grant``; None: the CLI).
    """
    require_utc(now)
    check_client_name(name)
    check_grant(scopes, granter)
    # A name stays with its tenant, revoked or not: its keys' history belongs there.
    if state.active or (state.name is not None and state.tenant != tenant):
        raise InvalidInput(f"a client named {name!r} already exists; `clients rotate {name}` issues another key")
    return [ClientKeyIssued(name, tenant, check_scopes(scopes), key_id_of(key_hash), key_hash, now)]


def decide_rotate(state: ClientState, name: str, *, key_hash: str, now: datetime,
                  granter: Caller | None = None) -> list[ClientKeyIssued]:
    """Another live key, with the client's tenant and scopes; its other keys stay live.

    A new key is a grant of the client's scopes: ``granter`` must hold them (``check_grant``).
    """
    require_utc(now)
    if state.name is None:
        raise NotFound(f"no client named {name!r}")
    check_grant(state.scopes, granter)
    if not state.active:
        raise InvalidInput(f"client {name!r} has no live key; create it again with `clients create {name}`")
    return [ClientKeyIssued(name, state.tenant, state.scopes, key_id_of(key_hash), key_hash, now)]


def decide_revoke(state: ClientState, name: str, key_id: str | None = None, *, now: datetime,
                  revoker: Caller | None = None) -> list[ClientKeyRevoked]:
    """Revoke one key (``key_id``) or every live key; nothing when already revoked, ``NotFound`` when unknown.

    An operator client is the CLI's to manage: a key (``revoker``) may not
    revoke it, or a tenant's admin could blind the deployment's monitoring.
    """
    require_utc(now)
    if state.name is None:
        raise NotFound(f"no client named {name!r}")
    if revoker is not None and OPERATOR in state.scopes:
        raise Forbidden("an operator client is managed only by `authledger clients` at the server, never over HTTP")
    if key_id is None:
        return [ClientKeyRevoked(name, live, now) for live in state.live]
    if key_id not in state.keys:
        # The id is not echoed: a key pasted where its id belongs must not end up in an error or a log.
        raise NotFound(f"client {name!r} has no key of that id; `clients list` shows its key ids")
    return [ClientKeyRevoked(name, key_id, now)] if key_id in state.live else []
