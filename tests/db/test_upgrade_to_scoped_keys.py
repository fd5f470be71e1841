"""`db init` takes a version-3 database, whose clients were registered the old way, to scoped keys.

Version 3 kept one key per client in ``api_clients`` and wrote
``ClientRegistered``/``ClientRevoked``. After the upgrade those keys keep
working, in the default tenant with the scopes of that time, every key is
listed, and the new projection equals a replay of the log.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, text

from domain.clients import LEGACY_SCOPES, Caller
from domain.tokens import hash_token
from infra.db.schema import SCHEMA_VERSION
from infra.services.clients import authenticate, new_api_key
from infra.services.unit_of_work import ServiceContext
from tests.http.support import asgi_client
from tests.support.cli import Env, cli_outcome
from tests.support.replay import assert_projections_match_log

V3_API_CLIENTS = """
    CREATE TABLE api_clients (
        name        text PRIMARY KEY,
        key_hash    text        NOT NULL UNIQUE,
        status      text        NOT NULL CHECK (status IN ('active', 'revoked')),
        created_at  timestamptz NOT NULL,
        revoked_at  timestamptz
    );
    GRANT SELECT, INSERT, UPDATE, DELETE ON api_clients TO authledger_app;
"""
APPEND = text("""
    INSERT INTO events (stream_id, stream_version, event_id, event_type, schema_version, payload)
    VALUES (:stream, :version, gen_random_uuid(), :event_type, 1, CAST(:payload AS jsonb))
""")
KEEP = text("""
    INSERT INTO api_clients (name, key_hash, status, created_at, revoked_at)
    VALUES (:name, :key_hash, :status, :created_at, :revoked_at)
    ON CONFLICT (name) DO UPDATE SET key_hash = EXCLUDED.key_hash, status = EXCLUDED.status,
                                     created_at = EXCLUDED.created_at, revoked_at = EXCLUDED.revoked_at
""")
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def make_version_3(admin_engine: Engine) -> dict[str, str]:
    """A version-3 database holding three clients registered the old way; their keys, by name."""
    keys = {"shop": new_api_key(), "old": new_api_key(), "gone": new_api_key(), "old-before": new_api_key()}
    history = [  # (client, event, key) in the order they happened
        ("shop", "ClientRegistered", "shop"), ("old", "ClientRegistered", "old-before"),
        ("old", "ClientRevoked", None), ("old", "ClientRegistered", "old"),
        ("gone", "ClientRegistered", "gone"), ("gone", "ClientRevoked", None),
    ]
    with admin_engine.begin() as connection:
        connection.execute(text("DROP TABLE api_keys, tenants"))
        connection.execute(text("DELETE FROM schema_version WHERE version >= 4"))
        connection.connection.driver_connection.execute(V3_API_CLIENTS)
        versions: dict[str, int] = {}
        for minute, (name, event_type, key) in enumerate(history):
            at = T0.replace(minute=minute)
            versions[name] = versions.get(name, 0) + 1
            if event_type == "ClientRegistered":
                payload = {"name": name, "key_hash": hash_token(keys[key]), "created_at": at.isoformat()}
                row = {"name": name, "key_hash": hash_token(keys[key]), "status": "active", "created_at": at,
                       "revoked_at": None}
            else:
                payload = {"name": name, "revoked_at": at.isoformat()}
                row = {**connection.execute(text("SELECT * FROM api_clients WHERE name = :name"),
                                            {"name": name}).one()._asdict(), "status": "revoked", "revoked_at": at}
            connection.execute(APPEND, {"stream": f"client:{name}", "version": versions[name],
                                        "event_type": event_type, "payload": json.dumps(payload)})
            connection.execute(KEEP, row)
    return keys


def test_db_init_upgrades_a_version_3_database_and_its_keys_keep_working(
    env: Env, engine: Engine, admin_engine: Engine
) -> None:
    keys = make_version_3(admin_engine)
    assert f"expects {SCHEMA_VERSION}" in cli_outcome(env, "db", "check")[1]

    code, output = cli_outcome(env, "db", "init")

    assert code == 0 and f"upgraded from schema version 3 (schema version {SCHEMA_VERSION})" in output, output
    legacy = frozenset(LEGACY_SCOPES)
    assert authenticate(engine, keys["shop"]) == Caller("shop", "default", legacy, "legacy:shop")
    assert authenticate(engine, keys["old"]) == Caller("old", "default", legacy, "legacy:old")
    assert authenticate(engine, keys["gone"]) is None and authenticate(engine, keys["old-before"]) is None
    listed = json.loads(cli_outcome(env, "clients", "list", "--json")[1])
    assert [(k["client"], k["key_id"], k["status"], k["scopes"]) for k in listed] == [
        ("gone", "legacy:gone", "revoked", ["send", "verify", "review"]),
        ("old", "legacy:old", "active", ["send", "verify", "review"]),
        ("shop", "legacy:shop", "active", ["send", "verify", "review"]),
    ]
    assert_projections_match_log(engine)
    assert cli_outcome(env, "projections", "verify")[0] == 0
    assert cli_outcome(env, "db", "check")[0] == 0
    code, output = cli_outcome(env, "projections", "rebuild", "api_keys")
    assert code == 0, output
    assert authenticate(engine, keys["shop"]) is not None
    assert_projections_match_log(engine)
    with admin_engine.connect() as connection:
        assert connection.execute(text("SELECT to_regclass('api_clients')")).scalar() is None


def test_the_upgrade_is_idempotent(env: Env, engine: Engine, admin_engine: Engine) -> None:
    keys = make_version_3(admin_engine)
    cli_outcome(env, "db", "init")
    code, output = cli_outcome(env, "db", "init")
    assert code == 0 and "already initialised" in output
    assert authenticate(engine, keys["shop"]) is not None
    assert_projections_match_log(engine)


def test_a_legacy_client_can_be_rotated_and_its_old_key_revoked_by_id(
    env: Env, engine: Engine, admin_engine: Engine
) -> None:
    keys = make_version_3(admin_engine)
    cli_outcome(env, "db", "init")

    code, output = cli_outcome(env, "clients", "rotate", "shop", "--json")
    assert code == 0, output
    new_key, new_id = json.loads(output)["api_key"], json.loads(output)["key_id"]
    assert authenticate(engine, new_key) == Caller("shop", "default", frozenset(LEGACY_SCOPES), new_id)
    assert authenticate(engine, keys["shop"]) == Caller("shop", "default", frozenset(LEGACY_SCOPES), "legacy:shop")
    assert cli_outcome(env, "clients", "revoke", "shop", "--key", "legacy:shop")[0] == 0
    assert authenticate(engine, keys["shop"]) is None and authenticate(engine, new_key) is not None
    assert_projections_match_log(engine)


@pytest.mark.anyio
async def test_an_upgraded_key_keeps_what_the_api_offered_it_and_no_more(
    env: Env, ctx: ServiceContext, admin_engine: Engine
) -> None:
    keys = make_version_3(admin_engine)
    cli_outcome(env, "db", "init")
    async with asgi_client(ctx, keys["shop"]) as api:
        sent = await api.post("/v1/password-resets", json={"user_id": "42", "email": "ada@example.com"},
                              headers={"Idempotency-Key": "k1"})
        assert sent.status_code == 202, sent.text
        assert (await api.get("/v1/timeline", params={"user_id": "42"})).status_code == 200
        assert (await api.get("/metrics")).status_code == 403
        assert (await api.get("/v1/admin/clients")).status_code == 403
