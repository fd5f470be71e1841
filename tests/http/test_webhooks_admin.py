"""Webhook endpoints over HTTP: an admin key manages its own tenant's, never another's, and sees a secret once."""

from __future__ import annotations

from uuid import uuid4

import httpx
import pytest
from sqlalchemy import Engine

from infra.services.clients import create_client
from infra.services.tenants import create_tenant
from infra.services.unit_of_work import ServiceContext
from tests.http.support import asgi_client, assert_problem, log_size

pytestmark = pytest.mark.anyio


async def post(client: httpx.AsyncClient, path: str, body: object | None = None) -> httpx.Response:
    return await client.post(path, json=body, headers={"Idempotency-Key": str(uuid4())})


def admin_of(ctx: ServiceContext, tenant: str) -> str:
    create_tenant(ctx, tenant)
    return create_client(ctx, f"{tenant}-admin", tenant=tenant, scopes=["admin"]).api_key


async def test_an_admin_key_adds_lists_rotates_and_removes_its_tenants_endpoints(ctx: ServiceContext) -> None:
    async with asgi_client(ctx, admin_of(ctx, "acme")) as acme:
        added = await post(acme, "/v1/admin/webhooks", {"url": "https://hooks.acme.test/a",
                                                       "event_types": ["otp.verified"]})
        assert added.status_code == 201, added.text
        endpoint = added.json()
        assert endpoint["tenant"] == "acme" and endpoint["secret"].startswith("whsec_")
        listed = (await acme.get("/v1/admin/webhooks")).json()["endpoints"]
        assert [e["endpoint_id"] for e in listed] == [endpoint["endpoint_id"]]
        assert endpoint["secret"] not in str(listed)
        rotated = await post(acme, f"/v1/admin/webhooks/{endpoint['endpoint_id']}/rotate")
        assert rotated.status_code == 201 and rotated.json()["secret"] != endpoint["secret"]
        removed = await post(acme, f"/v1/admin/webhooks/{endpoint['endpoint_id']}/remove")
        assert removed.json() == {"endpoint_id": endpoint["endpoint_id"], "status": "removed"}


async def test_another_tenants_endpoint_is_a_404_and_bad_urls_a_400_writing_nothing(
    ctx: ServiceContext, engine: Engine
) -> None:
    async with asgi_client(ctx, admin_of(ctx, "acme")) as acme, asgi_client(ctx, admin_of(ctx, "globex")) as globex:
        endpoint = (await post(acme, "/v1/admin/webhooks", {"url": "https://hooks.acme.test/a"})).json()
        before = log_size(engine)
        assert_problem(await post(globex, f"/v1/admin/webhooks/{endpoint['endpoint_id']}/rotate"), 404, "not-found")
        assert_problem(await post(globex, f"/v1/admin/webhooks/{endpoint['endpoint_id']}/remove"), 404, "not-found")
        assert (await globex.get("/v1/admin/webhooks")).json() == {"endpoints": []}
        for body in ({"url": "http://hooks.acme.test/a"}, {"url": "https://x.test", "event_types": ["nope"]},
                     {"url": "file:///etc/passwd"}, {}):
            assert (await post(globex, "/v1/admin/webhooks", body)).status_code == 400, body
        assert_problem(await post(globex, "/v1/admin/webhooks/not-an-id/rotate"), 404, "not-found")
        assert log_size(engine) == before
