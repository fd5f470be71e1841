"""`authledger tenants` and `authledger clients create|rotate|list|revoke`: keys shown once, kept only hashed,
several live keys per client, every change an event."""

from __future__ import annotations

import json

from sqlalchemy import Engine, text

from domain.clients import LEGACY_SCOPES, Caller, decide_create, fold_client, key_id_of
from domain.tokens import hash_token
from infra.services.clients import KeyCache, authenticate, new_api_key
from infra.services.unit_of_work import ServiceContext, decide_events_on_stream
from tests.support.cli import Env, cli_outcome
from tests.support.log_reading import stream_events
from tests.support.replay import assert_projections_match_log


def client_of(engine: Engine, api_key: str) -> str | None:
    caller = authenticate(engine, api_key)
    return caller and caller.client


def create(env: Env, name: str, *options: str) -> dict[str, object]:
    code, output = cli_outcome(env, "clients", "create", name, *(options or ("--scope", "send")), "--json")
    assert code == 0, output
    return json.loads(output)


def everything_stored(engine: Engine) -> str:
    with engine.connect() as connection:
        events = connection.execute(text("SELECT payload::text || metadata::text FROM events")).scalars().all()
        keys = connection.execute(text("SELECT row_to_json(k)::text FROM api_keys k")).scalars().all()
    return "\n".join(events + keys)


def log_size(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(text("SELECT count(*) FROM events")).scalar_one()


def test_a_client_is_created_with_a_key_shown_once_and_stored_hashed(env: Env, engine: Engine) -> None:
    created = create(env, "shop", "--scope", "send", "--scope", "verify")
    assert set(created) == {"name", "tenant", "scopes", "key_id", "api_key"}
    assert (created["name"], created["tenant"], created["scopes"]) == ("shop", "default", ["send", "verify"])

    assert authenticate(engine, created["api_key"]) == Caller("shop", "default", frozenset({"send", "verify"}),
                                                                 created["key_id"])
    stored = everything_stored(engine)
    assert created["api_key"] not in stored and hash_token(created["api_key"]) in stored
    [issued] = stream_events(engine, "client:shop")
    assert type(issued).__name__ == "ClientKeyIssued" and issued.key_hash == hash_token(created["api_key"])
    assert issued.key_id == created["key_id"] == key_id_of(issued.key_hash)
    assert_projections_match_log(engine)


def test_the_plain_output_says_the_key_is_shown_once(env: Env) -> None:
    code, output = cli_outcome(env, "clients", "create", "shop", "--scope", "send")
    assert code == 0 and "shown this once" in output and "alk_" in output


def test_a_client_belongs_to_a_tenant_that_was_created(engine: Engine, env: Env) -> None:
    code, output = cli_outcome(env, "clients", "create", "shop", "--tenant", "acme", "--scope", "send")
    assert code == 2 and "no tenant named 'acme'" in output and log_size(engine) == 0

    code, output = cli_outcome(env, "tenants", "create", "acme", "--json")
    assert code == 0 and json.loads(output)["name"] == "acme"
    created = create(env, "shop", "--tenant", "acme", "--scope", "review", "--scope", "admin")

    assert authenticate(engine, created["api_key"]) == Caller("shop", "acme", frozenset({"review", "admin"}),
                                                              created["key_id"])
    assert stream_events(engine, "client:acme/shop"), "another tenant's clients are named within it"
    assert [type(e).__name__ for e in stream_events(engine, "tenant:acme")] == ["TenantCreated"]
    assert_projections_match_log(engine)


def test_tenants_are_listed_with_the_default_first(env: Env) -> None:
    cli_outcome(env, "tenants", "create", "shop")
    cli_outcome(env, "tenants", "create", "acme")
    code, output = cli_outcome(env, "tenants", "list", "--json")
    listed = json.loads(output)
    assert code == 0 and [t["name"] for t in listed] == ["default", "acme", "shop"]
    assert listed[0]["created_at"] is None and listed[1]["created_at"]
    assert "default" in cli_outcome(env, "tenants", "list")[1]


def test_tenant_mistakes_are_one_line_errors_that_write_nothing(env: Env, engine: Engine) -> None:
    for name in ("default", "Bad Name", ""):
        code, output = cli_outcome(env, "tenants", "create", name)
        assert code == 2 and "Traceback" not in output
    cli_outcome(env, "tenants", "create", "acme")
    code, output = cli_outcome(env, "tenants", "create", "acme")
    assert code == 2 and "already exists" in output
    assert log_size(engine) == 1


def test_scopes_are_required_and_checked(env: Env, engine: Engine) -> None:
    code, output = cli_outcome(env, "clients", "create", "shop")
    assert code == 2 and "--scope" in output
    code, output = cli_outcome(env, "clients", "create", "shop", "--scope", "everything")
    assert code == 2 and "unknown scope 'everything'" in output and "send, verify, review, admin, metrics" in output
    assert log_size(engine) == 0


def test_a_rotated_client_has_two_live_keys_until_the_old_one_is_revoked(engine: Engine, env: Env) -> None:
    old = create(env, "shop", "--scope", "send", "--scope", "metrics")

    code, output = cli_outcome(env, "clients", "rotate", "shop", "--json")

    assert code == 0, output
    new = json.loads(output)
    assert new["key_id"] != old["key_id"] and new["scopes"] == ["send", "metrics"] and new["tenant"] == "default"
    assert client_of(engine, old["api_key"]) == client_of(engine, new["api_key"]) == "shop"

    code, output = cli_outcome(env, "clients", "revoke", "shop", "--key", old["key_id"], "--json")
    assert code == 0 and json.loads(output)["key_ids"] == [old["key_id"]]
    assert client_of(engine, old["api_key"]) is None and client_of(engine, new["api_key"]) == "shop"
    assert "already revoked" in cli_outcome(env, "clients", "revoke", "shop", "--key", old["key_id"])[1]
    assert_projections_match_log(engine)


def test_every_key_is_listed_with_its_revocation_time_but_never_the_key(engine: Engine, env: Env) -> None:
    first = create(env, "shop")
    second = json.loads(cli_outcome(env, "clients", "rotate", "shop", "--json")[1])
    cli_outcome(env, "clients", "revoke", "shop", "--key", first["key_id"])
    create(env, "billing", "--scope", "review")
    cli_outcome(env, "clients", "revoke", "billing")

    code, output = cli_outcome(env, "clients", "list", "--json")

    assert code == 0
    listed = json.loads(output)
    assert [(k["client"], k["status"]) for k in listed] == [
        ("billing", "revoked"), ("shop", "revoked"), ("shop", "active")]
    assert set(listed[0]) == {"key_id", "client", "tenant", "scopes", "status", "created_at", "revoked_at"}
    assert listed[0]["revoked_at"] and listed[1]["revoked_at"] and listed[2]["revoked_at"] is None
    plain = cli_outcome(env, "clients", "list")[1]
    for key in (first, second):
        for secret in (key["api_key"], hash_token(key["api_key"])):
            assert secret not in output and secret not in plain
    assert first["key_id"] in plain and "revoked" in plain


def test_revoking_a_client_revokes_every_key_and_each_is_an_event(engine: Engine, env: Env) -> None:
    first = create(env, "shop")
    second = json.loads(cli_outcome(env, "clients", "rotate", "shop", "--json")[1])

    code, output = cli_outcome(env, "clients", "revoke", "shop", "--json")

    assert code == 0 and json.loads(output)["revoked"] is True
    assert client_of(engine, first["api_key"]) is None and client_of(engine, second["api_key"]) is None
    assert [type(e).__name__ for e in stream_events(engine, "client:shop")] == [
        "ClientKeyIssued", "ClientKeyIssued", "ClientKeyRevoked", "ClientKeyRevoked"]
    assert "already revoked" in cli_outcome(env, "clients", "revoke", "shop")[1]
    code, output = cli_outcome(env, "clients", "rotate", "shop")
    assert code == 2 and "no live key" in output


def test_a_revoked_name_can_be_created_again_with_a_new_key(engine: Engine, env: Env) -> None:
    old = create(env, "shop")["api_key"]
    cli_outcome(env, "clients", "revoke", "shop")
    new = create(env, "shop", "--scope", "review")["api_key"]
    assert client_of(engine, new) == "shop" and client_of(engine, old) is None
    assert_projections_match_log(engine)


def test_client_mistakes_are_one_line_errors_that_write_nothing(engine: Engine, env: Env) -> None:
    create(env, "shop")
    before = log_size(engine)
    code, output = cli_outcome(env, "clients", "create", "shop", "--scope", "send")
    assert code == 2 and "already exists" in output and "clients rotate shop" in output
    code, output = cli_outcome(env, "clients", "create", "Bad Name", "--scope", "send")
    assert code == 2 and "a client name is" in output
    code, output = cli_outcome(env, "clients", "revoke", "nobody")
    assert code == 3 and "no client named 'nobody'" in output
    code, output = cli_outcome(env, "clients", "rotate", "nobody")
    assert code == 3 and "no client named 'nobody'" in output
    code, output = cli_outcome(env, "clients", "revoke", "shop", "--key", "alk_pasted-where-the-id-belongs")
    assert code == 3 and "has no key of that id" in output and "alk_pasted" not in output
    assert log_size(engine) == before and "Traceback" not in output


def test_a_revocation_reaches_another_process_within_the_cache_second(engine: Engine, env: Env) -> None:
    # Another API process: its own cache, on a clock the test moves. The
    # revoking process clears its own cache; this one learns within a second.
    now = [100.0]
    other_process = KeyCache(seconds=1.0, clock=lambda: now[0])
    key = create(env, "shop")["api_key"]
    assert other_process.authenticate(engine, key) is not None

    cli_outcome(env, "clients", "revoke", "shop")

    assert client_of(engine, key) is None  # this process: at once
    now[0] += 0.999
    assert other_process.authenticate(engine, key) is not None  # still cached: no database read
    now[0] += 0.001
    assert other_process.authenticate(engine, key) is None


def test_the_cache_serves_a_known_key_without_reading_the_database(
    env: Env, engine: Engine, admin_engine: Engine
) -> None:
    now = [0.0]
    cache = KeyCache(seconds=1.0, clock=lambda: now[0])
    key = create(env, "shop")["api_key"]
    caller = cache.authenticate(engine, key)
    with admin_engine.connect() as connection:
        connection.execute(text("ALTER TABLE api_keys RENAME TO api_keys_away"))
        connection.commit()
    try:
        assert cache.authenticate(engine, key) == caller  # the table is gone, the answer cached
    finally:
        with admin_engine.connect() as connection:
            connection.execute(text("ALTER TABLE api_keys_away RENAME TO api_keys"))
            connection.commit()


def test_legacy_registrations_fold_into_the_default_tenant_with_legacy_scopes() -> None:
    from datetime import UTC, datetime

    from domain.clients import ClientRegistered, ClientRevoked, fold_client

    now = datetime(2026, 1, 1, tzinfo=UTC)
    state = fold_client([ClientRegistered("shop", "h1", now), ClientRevoked("shop", now),
                         ClientRegistered("shop", "h2", now)])
    assert state.tenant == "default" and set(state.scopes) == LEGACY_SCOPES
    assert state.live == ("legacy:shop",) and state.active


def test_two_tenants_each_have_a_client_web_managed_and_listed_per_tenant(engine: Engine, env: Env) -> None:
    for tenant in ("acme", "shop"):
        assert cli_outcome(env, "tenants", "create", tenant)[0] == 0
    default = create(env, "web")
    acme = create(env, "web", "--tenant", "acme", "--scope", "send")
    shop = create(env, "web", "--tenant", "shop", "--scope", "review")
    code, output = cli_outcome(env, "clients", "create", "web", "--tenant", "acme", "--scope", "send")
    assert code == 2 and "already exists" in output, "still unique within the tenant"

    callers = [authenticate(engine, key["api_key"]) for key in (default, acme, shop)]
    assert [(c.client, c.tenant) for c in callers if c] == [("web", "default"), ("web", "acme"), ("web", "shop")]
    rotated = json.loads(cli_outcome(env, "clients", "rotate", "web", "--tenant", "acme", "--json")[1])
    assert rotated["tenant"] == "acme" and rotated["scopes"] == ["send"]
    code, output = cli_outcome(env, "clients", "revoke", "web", "--tenant", "shop", "--json")
    assert code == 0 and json.loads(output)["key_ids"] == [shop["key_id"]]
    assert authenticate(engine, shop["api_key"]) is None
    assert authenticate(engine, default["api_key"]) and authenticate(engine, acme["api_key"])

    listed = {tenant: json.loads(cli_outcome(env, "clients", "list", "--tenant", tenant, "--json")[1])
              for tenant in ("default", "acme", "shop")}
    assert [(k["key_id"], k["status"]) for k in listed["acme"]] == [
        (acme["key_id"], "active"), (rotated["key_id"], "active")]
    assert [(k["key_id"], k["status"]) for k in listed["shop"]] == [(shop["key_id"], "revoked")]
    assert [k["key_id"] for k in listed["default"]] == [default["key_id"]]
    assert len(json.loads(cli_outcome(env, "clients", "list", "--json")[1])) == 4
    assert stream_events(engine, "client:web") and stream_events(engine, "client:acme/web")
    assert stream_events(engine, "client:shop/web")
    assert_projections_match_log(engine)


def test_a_client_another_tenant_created_before_names_were_per_tenant_keeps_working_where_it_is(
    ctx: ServiceContext, engine: Engine, env: Env
) -> None:
    assert cli_outcome(env, "tenants", "create", "acme")[0] == 0
    # What the release before wrote for `clients create web --tenant acme`: the global client:web stream.
    old_key = new_api_key()
    decide_events_on_stream(ctx, "client:web", fold_client, lambda state, now: decide_create(
        state, "web", tenant="acme", scopes=("send",), key_hash=hash_token(old_key), now=now))

    rotated = json.loads(cli_outcome(env, "clients", "rotate", "web", "--tenant", "acme", "--json")[1])
    default = create(env, "web")  # the name squatted before is free for the default tenant now

    assert [type(e).__name__ for e in stream_events(engine, "client:web")] == ["ClientKeyIssued"] * 2
    assert [e.tenant for e in stream_events(engine, "client:default/web")] == ["default"]
    assert (authenticate(engine, old_key).tenant, authenticate(engine, rotated["api_key"]).tenant) == ("acme", "acme")
    assert authenticate(engine, default["api_key"]).tenant == "default"
    code, output = cli_outcome(env, "clients", "revoke", "web", "--tenant", "acme", "--json")
    assert code == 0 and len(json.loads(output)["key_ids"]) == 2
    assert authenticate(engine, default["api_key"]) is not None
    assert_projections_match_log(engine)
