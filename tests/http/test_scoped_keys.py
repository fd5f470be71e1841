"""Scoped keys over HTTP: each scope opens its own operations only, /metrics and /readyz tell outsiders
nothing, and an admin key manages its own tenant's clients and mail, never another's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from uuid import UUID, uuid4

import attrs
import httpx
import pytest
from sqlalchemy import Engine, text

from domain.clients import SCOPES
from domain.delivery import DeliveryPolicy
from domain.reset import RequestReset
from domain.tokens import hash_token
from infra.clock import ManualClock
from infra.db.engine import Database
from infra.db.schema import SCHEMA_VERSION
from infra.delivery.worker import Worker
from infra.services.clients import authenticate, create_client
from infra.services.reset import request_reset
from infra.services.tenants import create_tenant
from infra.services.unit_of_work import ServiceContext
from tests.http.support import asgi_client, assert_problem, log_size
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log

pytestmark = pytest.mark.anyio
ADA = {"user_id": "42", "email": "ada@example.com"}
# Every operation that needs a key, with the scope it needs; each answers something other than
# 401/403 for a key that holds the scope.
SOME_ID = "123e4567-e89b-12d3-a456-426614174000"
OPERATIONS = [
    ("send", "POST", "/v1/password-resets", ADA),
    ("send", "POST", "/v1/otp/challenges", ADA),
    ("verify", "POST", "/v1/password-resets/verify", {"token": "no-such-token"}),
    ("verify", "POST", "/v1/password-resets/consume", {"token": "no-such-token"}),
    ("verify", "POST", f"/v1/otp/challenges/{SOME_ID}/verify", {"code": "123456", "user_id": "42"}),
    ("review", "GET", "/v1/timeline?user_id=42", None),
    ("admin", "GET", "/v1/admin/clients", None),
    ("admin", "POST", "/v1/admin/clients", {"name": "made-by-admin", "scopes": ["admin"]}),
    ("admin", "POST", "/v1/admin/clients/nobody/rotate", None),
    ("admin", "POST", "/v1/admin/clients/nobody/revoke", {}),
    ("admin", "POST", f"/v1/admin/messages/{SOME_ID}/redrive", {"reason": "relay fixed"}),
    ("admin", "GET", "/v1/admin/webhooks", None),
    ("admin", "POST", "/v1/admin/webhooks", {"url": "https://hooks.app.test/a"}),
    ("admin", "POST", f"/v1/admin/webhooks/ep_{'0' * 32}/rotate", None),
    ("admin", "POST", f"/v1/admin/webhooks/ep_{'0' * 32}/remove", None),
    (("metrics", "operator"), "GET", "/metrics", None),
    (("metrics", "operator"), "GET", "/readyz", None),
]


async def call(client: httpx.AsyncClient, method: str, path: str, body: object | None) -> httpx.Response:
    headers = {"Idempotency-Key": str(uuid4())} if method == "POST" else {}
    return await client.request(method, path, json=body, headers=headers)


@pytest.fixture
async def anonymous(ctx: ServiceContext) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(ctx, None) as client:
        yield client


@pytest.mark.parametrize("scope", SCOPES)
async def test_a_key_is_refused_with_403_outside_its_scope_and_nothing_is_written(
    ctx: ServiceContext, engine: Engine, scope: str
) -> None:
    key = create_client(ctx, f"only-{scope}", scopes=[scope]).api_key
    async with asgi_client(ctx, key) as client:
        for needed, method, path, body in OPERATIONS:
            before = log_size(engine)
            response = await call(client, method, path, body)
            if scope in needed if isinstance(needed, tuple) else needed == scope:
                assert response.status_code not in (401, 403), (path, response.text)
            else:
                problem = assert_problem(response, 403, "forbidden")
                named = needed if isinstance(needed, tuple) else (needed,)
                assert all(repr(one) in problem["detail"] for one in named) and log_size(engine) == before


async def test_metrics_need_a_bearer_key_with_the_metrics_scope(
    anonymous: httpx.AsyncClient, monitor: httpx.AsyncClient, api: httpx.AsyncClient
) -> None:
    missing = assert_problem(await anonymous.get("/metrics"), 401, "unauthorized")
    assert "authledger_" not in str(missing)
    assert_problem(await api.get("/metrics"), 403, "forbidden")
    scraped = await monitor.get("/metrics")
    assert scraped.status_code == 200 and "authledger_emails_queued_total" in scraped.text


async def test_readyz_tells_an_outsider_only_ready_or_not(
    anonymous: httpx.AsyncClient, monitor: httpx.AsyncClient, api: httpx.AsyncClient, admin_engine: Engine
) -> None:
    ready = await anonymous.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {"status": "ready"}
    with admin_engine.begin() as connection:
        connection.execute(text("DELETE FROM schema_version WHERE version >= 2"))
    assert (await anonymous.get("/readyz")).json() == {"status": "ready"}  # a plain connectivity check
    assert_problem(await api.get("/readyz"), 403, "forbidden")
    problem = assert_problem(await monitor.get("/readyz"), 503, "schema-mismatch")
    assert f"not {SCHEMA_VERSION}" in problem["detail"]
    assert (await anonymous.get("/healthz")).status_code == 200


async def test_an_unreachable_database_is_not_ready_for_an_outsider_without_details(ctx: ServiceContext) -> None:
    dead = Database("postgresql+psycopg://nobody@127.0.0.1:1/none").engine()
    async with asgi_client(attrs.evolve(ctx, engine=dead), None) as anonymous:
        response = await anonymous.get("/readyz")
    problem = assert_problem(response, 503, "database-unavailable")
    assert "127.0.0.1" not in response.text and problem["detail"] == "The database cannot be reached."
    dead.dispose()


@attrs.frozen
class Tenant:
    name: str
    admin: httpx.AsyncClient


@pytest.fixture
async def tenants(ctx: ServiceContext) -> AsyncIterator[tuple[Tenant, Tenant]]:
    """Two tenants, acme and shop, each with an admin key (which may grant send, verify and review too)
    and a client named after it."""
    made = []
    clients = []
    for name in ("acme", "shop"):
        create_tenant(ctx, name)
        admin_key = create_client(ctx, f"{name}-admin", tenant=name,
                                  scopes=["admin", "send", "verify", "review"]).api_key
        create_client(ctx, f"{name}-app", tenant=name, scopes=["send", "verify"])
        client = asgi_client(ctx, admin_key)
        clients.append(client)
        made.append(Tenant(name, await client.__aenter__()))
    yield made[0], made[1]
    for client in clients:
        await client.__aexit__(None, None, None)


async def test_an_admin_lists_only_its_own_tenants_keys(tenants: tuple[Tenant, Tenant]) -> None:
    acme, _ = tenants
    response = await acme.admin.get("/v1/admin/clients")
    assert response.status_code == 200
    keys = response.json()["keys"]
    assert sorted(k["client"] for k in keys) == ["acme-admin", "acme-app"]
    assert {k["tenant"] for k in keys} == {"acme"} and all("api_key" not in k and "key_hash" not in k for k in keys)


async def test_an_admin_creates_rotates_and_revokes_a_client_of_its_tenant(
    tenants: tuple[Tenant, Tenant], engine: Engine
) -> None:
    acme, _ = tenants
    created = await acme.admin.post("/v1/admin/clients", json={"name": "acme-web", "scopes": ["send", "review"]})
    assert created.status_code == 201, created.text
    first = created.json()
    assert (first["tenant"], first["scopes"]) == ("acme", ["send", "review"])
    assert authenticate(engine, first["api_key"]).tenant == "acme"

    rotated = await acme.admin.post("/v1/admin/clients/acme-web/rotate")
    assert rotated.status_code == 201, rotated.text
    second = rotated.json()
    assert authenticate(engine, first["api_key"]) and authenticate(engine, second["api_key"])

    revoked = await acme.admin.post("/v1/admin/clients/acme-web/revoke", json={"key_id": first["key_id"]})
    assert revoked.status_code == 200 and revoked.json() == {
        "name": "acme-web", "revoked": True, "key_ids": [first["key_id"]]}
    assert authenticate(engine, first["api_key"]) is None and authenticate(engine, second["api_key"])
    again = await acme.admin.post("/v1/admin/clients/acme-web/revoke", json={})
    assert again.json() == {"name": "acme-web", "revoked": True, "key_ids": [second["key_id"]]}
    assert_projections_match_log(engine)


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/v1/admin/clients/{client}/rotate", None),
    ("POST", "/v1/admin/clients/{client}/revoke", {}),
    ("POST", "/v1/admin/clients/{client}/revoke", {"key_id": "legacy:x"}),
])
async def test_another_tenants_client_is_answered_as_one_that_does_not_exist(
    tenants: tuple[Tenant, Tenant], engine: Engine, method: str, path: str, body: object
) -> None:
    acme, _ = tenants
    before = log_size(engine)
    theirs = await acme.admin.request(method, path.format(client="shop-app"), json=body)
    nobodys = await acme.admin.request(method, path.format(client="nobody"), json=body)
    assert_problem(theirs, 404, "not-found")
    assert_problem(nobodys, 404, "not-found")
    assert theirs.json()["detail"].replace("shop-app", "X") == nobodys.json()["detail"].replace("nobody", "X")
    assert log_size(engine) == before


@pytest.mark.parametrize("body", [
    {"name": "x", "scopes": []}, {"name": "x", "scopes": ["root"]}, {"name": "x", "scopes": ["send", "send"]},
    {"name": "Bad Name", "scopes": ["send"]}, {"name": "x"}, {"name": "x", "scopes": "send"},
    {"name": "x", "scopes": ["send"], "tenant": "shop"},
])
async def test_a_bad_client_body_is_400_and_writes_nothing(
    tenants: tuple[Tenant, Tenant], engine: Engine, body: object
) -> None:
    acme, _ = tenants
    before = log_size(engine)
    assert (await acme.admin.post("/v1/admin/clients", json=body)).status_code == 400
    assert log_size(engine) == before


async def test_a_name_taken_in_the_tenant_is_refused_and_writes_nothing(
    tenants: tuple[Tenant, Tenant], engine: Engine
) -> None:
    acme, _ = tenants
    before = log_size(engine)
    response = await acme.admin.post("/v1/admin/clients", json={"name": "acme-app", "scopes": ["send"]})
    assert_problem(response, 400, "invalid-input")
    assert log_size(engine) == before


def abandoned_message(ctx: ServiceContext, clock: ManualClock) -> UUID:
    """A reset email of user 42 of the default tenant, abandoned after two failed attempts."""
    capped = attrs.evolve(ctx, delivery_policy=DeliveryPolicy(max_attempts=2))
    message_id = request_reset(capped, RequestReset("42", "ada@example.com")).message_id
    mailer = RecordingMailer()
    mailer.fail_next = 2
    Worker(capped, mailer, sender="authledger <no-reply@app.test>").drain()
    clock.advance(capped.delivery_policy.backoff_cap + timedelta(seconds=1))
    assert Worker(capped, mailer, sender="authledger <no-reply@app.test>").drain() == {"abandoned": 1}
    return message_id


async def test_an_admin_redrives_its_tenants_message_with_a_reason_and_never_anothers(
    ctx: ServiceContext, engine: Engine, clock: ManualClock, tenants: tuple[Tenant, Tenant]
) -> None:
    acme, _ = tenants
    message_id = abandoned_message(ctx, clock)
    before = log_size(engine)
    path = f"/v1/admin/messages/{message_id}/redrive"

    assert_problem(await acme.admin.post(path, json={"reason": "relay fixed"}), 404, "not-found")
    assert_problem(await acme.admin.post(f"/v1/admin/messages/{uuid4()}/redrive", json={"reason": "x"}),
                   404, "not-found")
    assert log_size(engine) == before

    default_admin = create_client(ctx, "ops", scopes=["admin"]).api_key
    before = log_size(engine)
    async with asgi_client(ctx, default_admin) as ops:
        assert_problem(await ops.post(path, json={"reason": "  "}), 400, "invalid-input")
        assert_problem(await ops.post(path, json={"reason": "ask ada@example.com"}), 400, "invalid-input")
        assert log_size(engine) == before
        response = await ops.post(path, json={"reason": "relay fixed, ticket 7"})
        assert response.status_code == 200 and response.json() == {
            "message_id": str(message_id), "redriven": True, "state": "pending"}
        assert_problem(await ops.post(path, json={"reason": "twice"}), 400, "invalid-input")
    with engine.connect() as connection:
        metadata = connection.execute(text(
            "SELECT metadata FROM events WHERE event_type = 'DeliveryRedriven'")).scalar_one()
    assert metadata["client"] == "ops" and metadata["actor"] == "client:ops"
    assert_projections_match_log(engine)


def api_keys_rows(engine: Engine) -> list[tuple[str, str, str, str]]:
    with engine.connect() as connection:
        return [tuple(row) for row in connection.execute(text(
            "SELECT key_id, client, tenant, status FROM api_keys ORDER BY key_id"))]


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/v1/admin/clients", {"name": "acme-dash", "scopes": ["metrics"]}),
    ("POST", "/v1/admin/clients", {"name": "acme-dash", "scopes": ["send", "metrics"]}),
    ("POST", "/v1/admin/clients", {"name": "acme-prom", "scopes": ["operator"]}),
    ("POST", "/v1/admin/clients/acme-metrics/rotate", None),
    ("POST", "/v1/admin/clients/acme-operator/rotate", None),
    ("POST", "/v1/admin/clients/acme-operator/revoke", {}),
])
async def test_an_admin_cannot_mint_a_scope_it_lacks_nor_operator_and_nothing_is_written(
    ctx: ServiceContext, engine: Engine, tenants: tuple[Tenant, Tenant], method: str, path: str, body: object
) -> None:
    acme, _ = tenants
    # At the server, the operator gave acme a metrics client and an operator client.
    create_client(ctx, "acme-metrics", tenant="acme", scopes=["metrics"])
    create_client(ctx, "acme-operator", tenant="acme", scopes=["operator"])
    before, keys = log_size(engine), api_keys_rows(engine)

    response = await acme.admin.request(method, path, json=body)

    assert_problem(response, 403, "forbidden")
    assert "alk_" not in response.text
    assert log_size(engine) == before and api_keys_rows(engine) == keys


def metadata_of(engine: Engine, event_type: str) -> list[dict[str, str]]:
    with engine.connect() as connection:
        return list(connection.execute(text(
            "SELECT metadata FROM events WHERE event_type = :type ORDER BY global_position"),
            {"type": event_type}).scalars())


async def test_every_event_an_api_call_appends_names_the_key_and_after_a_rotation_the_new_key(
    ctx: ServiceContext, engine: Engine, tenants: tuple[Tenant, Tenant]
) -> None:
    acme, _ = tenants
    first = (await acme.admin.post("/v1/admin/clients", json={"name": "acme-web", "scopes": ["send"]})).json()
    ada = {"user_id": "42", "email": "ada@example.com"}
    async with asgi_client(ctx, first["api_key"]) as web:
        assert (await call(web, "POST", "/v1/password-resets", ada)).status_code == 202
    second = (await acme.admin.post("/v1/admin/clients/acme-web/rotate")).json()
    async with asgi_client(ctx, second["api_key"]) as web:
        assert (await call(web, "POST", "/v1/otp/challenges", ada)).status_code == 202

    [reset_request] = metadata_of(engine, "ResetRequested")
    [challenge] = metadata_of(engine, "OtpChallengeIssued")
    assert (reset_request["client"], reset_request["key_id"]) == ("acme-web", first["key_id"])
    assert (challenge["client"], challenge["key_id"]) == ("acme-web", second["key_id"])
    # The admin calls name the admin's own key.
    [admin_key] = [row for row in api_keys_rows(engine) if row[1] == "acme-admin"]
    assert {m["key_id"] for m in metadata_of(engine, "ClientKeyIssued")[-2:]} == {admin_key[0]}
    for metadata in metadata_of(engine, "ResetRequested") + metadata_of(engine, "ClientKeyIssued"):
        stored = str(metadata)
        assert first["api_key"] not in stored and second["api_key"] not in stored
        assert hash_token(first["api_key"]) not in stored and hash_token(second["api_key"]) not in stored


async def test_two_tenants_each_have_a_client_named_web_and_each_key_acts_for_its_own_tenant(
    ctx: ServiceContext, engine: Engine, tenants: tuple[Tenant, Tenant]
) -> None:
    acme, shop = tenants
    made = {}
    for tenant in (acme, shop):
        response = await tenant.admin.post("/v1/admin/clients", json={"name": "web", "scopes": ["send"]})
        assert response.status_code == 201, response.text
        made[tenant.name] = response.json()
    for name, issued in made.items():
        caller = authenticate(engine, issued["api_key"])
        assert caller is not None and (caller.client, caller.tenant) == ("web", name)
        async with asgi_client(ctx, issued["api_key"]) as web:
            assert (await call(web, "POST", "/v1/password-resets", ADA)).status_code == 202
    # One tenant's rotation or revocation of its web leaves the other's alone.
    assert (await acme.admin.post("/v1/admin/clients/web/revoke", json={})).status_code == 200
    assert authenticate(engine, made["acme"]["api_key"]) is None
    assert authenticate(engine, made["shop"]["api_key"]) is not None
    listed = (await shop.admin.get("/v1/admin/clients")).json()["keys"]
    assert [(k["client"], k["status"]) for k in listed if k["client"] == "web"] == [("web", "active")]
    with engine.connect() as connection:
        tenants_of_users = connection.execute(text(
            "SELECT DISTINCT user_id FROM email_outbox ORDER BY user_id")).scalars().all()
    assert tenants_of_users == ["acme 42", "shop 42"]
    assert_projections_match_log(engine)
