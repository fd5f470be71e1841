"""Who may issue which keys, and where each tenant's clients live, as given events / when a command / then events."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import pytest

from domain.clients import (
    OPERATOR,
    SCOPES,
    TENANT_SCOPES,
    Caller,
    ClientKeyIssued,
    ClientKeyRevoked,
    ClientState,
    client_stream,
    decide_create,
    decide_revoke,
    decide_rotate,
    fold_client,
    key_id_of,
    legacy_stream_serves,
)
from domain.errors import Forbidden
from domain.log import RecordedEvent
from projections.timeline import timeline

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
ADMIN = Caller("acme-admin", "acme", frozenset({"admin", "send", "review"}), "key_admin")
ALL_BUT_OPERATOR = Caller("acme-root", "acme", frozenset(TENANT_SCOPES), "key_root")
EVERYTHING = Caller("ops", "default", frozenset(SCOPES), "key_ops")


def issued(name: str, tenant: str, *scopes: str, key_hash: str = "h1") -> ClientKeyIssued:
    return ClientKeyIssued(name, tenant, scopes, key_id_of(key_hash), key_hash, NOW)


def test_a_key_grants_the_scopes_it_holds() -> None:
    [event] = decide_create(ClientState(), "web", tenant="acme", scopes=("send", "review"), key_hash="h1", now=NOW,
                            granter=ADMIN)
    assert event == issued("web", "acme", "send", "review")


@pytest.mark.parametrize("scopes", [("metrics",), ("send", "verify"), ("admin", "metrics")])
def test_a_key_cannot_grant_a_scope_it_lacks_and_the_refusal_names_it(scopes: tuple[str, ...]) -> None:
    with pytest.raises(Forbidden) as refused:
        decide_create(ClientState(), "web", tenant="acme", scopes=scopes, key_hash="h1", now=NOW, granter=ADMIN)
    lacking = [s for s in scopes if s not in ADMIN.scopes]
    assert all(repr(s) in refused.value.message for s in lacking)


@pytest.mark.parametrize("granter", [ALL_BUT_OPERATOR, EVERYTHING])
def test_no_key_grants_operator_not_even_one_that_holds_it(granter: Caller) -> None:
    with pytest.raises(Forbidden, match="only by `authledger clients`"):
        decide_create(ClientState(), "prom", tenant=granter.tenant, scopes=(OPERATOR,), key_hash="h1", now=NOW,
                      granter=granter)


def test_the_operator_at_the_cli_grants_any_scope() -> None:
    [event] = decide_create(ClientState(), "prom", tenant="default", scopes=(OPERATOR, "metrics"), key_hash="h1",
                            now=NOW, granter=None)
    assert event.scopes == ("metrics", "operator")


def test_rotating_grants_the_clients_scopes_again_so_the_key_must_hold_them() -> None:
    metrics_client = fold_client([issued("dash", "acme", "metrics")])
    with pytest.raises(Forbidden, match="'metrics'"):
        decide_rotate(metrics_client, "dash", key_hash="h2", now=NOW, granter=ADMIN)
    send_client = fold_client([issued("web", "acme", "send")])
    [event] = decide_rotate(send_client, "web", key_hash="h2", now=NOW, granter=ADMIN)
    assert event == issued("web", "acme", "send", key_hash="h2")


def test_an_operator_client_is_rotated_and_revoked_only_at_the_cli() -> None:
    prom = fold_client([issued("prom", "acme", OPERATOR)])
    with pytest.raises(Forbidden):
        decide_rotate(prom, "prom", key_hash="h2", now=NOW, granter=EVERYTHING)
    with pytest.raises(Forbidden):
        decide_revoke(prom, "prom", now=NOW, revoker=ADMIN)
    assert decide_revoke(prom, "prom", now=NOW, revoker=None) == [ClientKeyRevoked("prom", key_id_of("h1"), NOW)]


def test_each_tenant_names_its_clients_in_its_own_stream_and_the_default_tenant_keeps_its_old_ones() -> None:
    assert client_stream("web") == "client:web"  # the default tenant's, as before names were per tenant
    assert client_stream("web", "acme") == "client:acme/web" != client_stream("web", "shop")
    assert client_stream("web", "default") == "client:default/web"  # only when another tenant took client:web


def test_the_old_stream_serves_the_tenant_whose_client_it_already_holds() -> None:
    never = ClientState()
    acme_before_names_were_per_tenant = fold_client([issued("web", "acme", "send")])
    defaults = fold_client([issued("web", "default", "send")])
    assert legacy_stream_serves(never, "default") and not legacy_stream_serves(never, "acme")
    assert legacy_stream_serves(acme_before_names_were_per_tenant, "acme")
    # The default tenant's web then goes to client:default/web.
    assert not legacy_stream_serves(acme_before_names_were_per_tenant, "default")
    assert legacy_stream_serves(defaults, "default") and not legacy_stream_serves(defaults, "acme")


def test_a_history_line_names_the_client_and_the_key_that_acted() -> None:
    def recorded(position: int, metadata: dict[str, str]) -> RecordedEvent:
        event = ClientKeyRevoked("web", "key_x", NOW)
        return RecordedEvent(position, "client:acme/web", position, uuid4(), "ClientKeyRevoked", 1, event,
                             metadata, NOW)

    with_key, without = timeline([
        recorded(1, {"actor": "client:acme-admin", "client": "acme-admin", "key_id": "key_0123456789abcdef"}),
        recorded(2, {"actor": "client:acme-admin", "client": "acme-admin"}),  # appended before key ids
    ])
    assert with_key.actor == "client:acme-admin with key key_0123456789abcdef"
    assert without.actor == "client:acme-admin"
