"""`authledger clients create|list|revoke`: keys shown once, kept only hashed, every change an event."""

from __future__ import annotations

import json

from click.testing import CliRunner
from sqlalchemy import Engine, text

from cli import cli
from domain.tokens import hash_token
from infra.services.clients import authenticate
from tests.support.log_reading import stream_events
from tests.support.replay import assert_projections_match_log


def client_of(engine: Engine, api_key: str) -> str | None:
    caller = authenticate(engine, api_key)
    return caller and caller.client


def run(database_url: str, *args: str) -> tuple[int, str]:
    # No token keys: managing clients must not need the service's secrets.
    result = CliRunner().invoke(cli, list(args), env={"DATABASE_URL": database_url, "AUTHLEDGER_TOKEN_KEYS": ""})
    return result.exit_code, result.stdout if result.exit_code == 0 else result.output


def everything_stored(engine: Engine) -> str:
    with engine.connect() as connection:
        events = connection.execute(text("SELECT payload::text || metadata::text FROM events")).scalars().all()
        clients = connection.execute(text("SELECT row_to_json(c)::text FROM api_clients c")).scalars().all()
    return "\n".join(events + clients)


def test_a_client_is_created_with_a_key_shown_once_and_stored_hashed(database_url: str, engine: Engine) -> None:
    code, output = run(database_url, "clients", "create", "shop", "--json")
    assert code == 0, output
    created = json.loads(output)
    assert set(created) == {"name", "api_key"} and created["name"] == "shop"

    assert client_of(engine, created["api_key"]) == "shop"
    stored = everything_stored(engine)
    assert created["api_key"] not in stored and hash_token(created["api_key"]) in stored
    [registered] = stream_events(engine, "client:shop")
    assert type(registered).__name__ == "ClientRegistered" and registered.key_hash == hash_token(created["api_key"])
    assert_projections_match_log(engine)


def test_the_plain_output_says_the_key_is_shown_once(database_url: str) -> None:
    code, output = run(database_url, "clients", "create", "shop")
    assert code == 0 and "shown this once" in output and "alk_" in output


def test_clients_are_listed_without_their_keys(database_url: str) -> None:
    key = json.loads(run(database_url, "clients", "create", "shop", "--json")[1])["api_key"]
    run(database_url, "clients", "create", "billing")
    run(database_url, "clients", "revoke", "billing")

    code, output = run(database_url, "clients", "list", "--json")

    assert code == 0
    listed = json.loads(output)
    assert [(c["name"], c["status"]) for c in listed] == [("billing", "revoked"), ("shop", "active")]
    assert listed[0]["revoked_at"] and key not in output and hash_token(key) not in output
    assert "billing" in run(database_url, "clients", "list")[1]


def test_a_revoked_key_no_longer_authenticates_and_the_revocation_is_an_event(
    database_url: str, engine: Engine
) -> None:
    key = json.loads(run(database_url, "clients", "create", "shop", "--json")[1])["api_key"]

    code, output = run(database_url, "clients", "revoke", "shop", "--json")

    assert code == 0 and json.loads(output) == {"name": "shop", "revoked": True, "already_revoked": False}
    assert client_of(engine, key) is None
    assert [type(e).__name__ for e in stream_events(engine, "client:shop")] == ["ClientRegistered", "ClientRevoked"]
    assert "already revoked" in run(database_url, "clients", "revoke", "shop")[1]


def test_a_revoked_name_can_be_created_again_with_a_new_key(database_url: str, engine: Engine) -> None:
    old = json.loads(run(database_url, "clients", "create", "shop", "--json")[1])["api_key"]
    run(database_url, "clients", "revoke", "shop")
    new = json.loads(run(database_url, "clients", "create", "shop", "--json")[1])["api_key"]
    assert client_of(engine, new) == "shop" and client_of(engine, old) is None
    assert_projections_match_log(engine)


def test_mistakes_are_one_line_errors(database_url: str) -> None:
    run(database_url, "clients", "create", "shop")
    code, output = run(database_url, "clients", "create", "shop")
    assert code == 2 and "already exists" in output
    code, output = run(database_url, "clients", "create", "Bad Name")
    assert code == 2 and "a client name is" in output
    code, output = run(database_url, "clients", "revoke", "nobody")
    assert code == 3 and "no client named 'nobody'" in output
