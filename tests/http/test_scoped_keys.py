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
    ("admin", "POST", "/v1/admin/clients", {"name": "made-by-admin", "scopes": ["send"]}),
    ("admin", "POST", "/v1/admin/clients/nobody/rotate", None),
    ("admin", "POST", "/v1/admin/clients/nobody/revoke", {}),
    ("admin", "POST", f"/v1/admin/messages/{SOME_ID}/redrive", {"reason": "relay fixed"}),
    ("metrics", "GET", "/metrics", None),
    ("metrics", "GET", "/readyz", None),
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
            if needed == scope:
                assert response.status_code not in (401, 403), (path, response.text)
            else:
                problem = assert_problem(response, 403, "forbidden")
                assert repr(needed) in problem["detail"] and log_size(engine) == before


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
    """Two tenants, acme and shop, each with an admin key and a client named after it."""
    made = []
    clients = []
    for name in ("acme", "shop"):
        create_tenant(ctx, name)
        admin_key = create_client(ctx, f"{name}-admin", tenant=name, scopes=["admin"]).api_key
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
    acme, shop = tenants
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


async def test_a_taken_name_is_refused_and_writes_nothing(tenants: tuple[Tenant, Tenant], engine: Engine) -> None:
    acme, _ = tenants
    before = log_size(engine)
    for name in ("acme-app", "shop-app"):
        response = await acme.admin.post("/v1/admin/clients", json={"name": name, "scopes": ["send"]})
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
