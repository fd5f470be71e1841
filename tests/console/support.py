"""Helpers of the console tests: sign in through the forms, read a page's CSRF token, make real scoped keys."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx

from domain.tenants import DEFAULT_TENANT
from infra.services.clients import create_client
from infra.services.tenants import create_tenant, list_tenants
from infra.services.unit_of_work import ServiceContext

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(page: httpx.Response) -> str:
    found = CSRF.search(page.text)
    assert found, page.text
    return found.group(1)


def sign_in(client: Any, api_key: str) -> httpx.Response:
    """Open the sign-in page and submit ``api_key`` with its token, as a browser would."""
    form = client.get("/console/sign-in")
    return client.post("/console/sign-in", data={"csrf": csrf_of(form), "api_key": api_key}, follow_redirects=False)


def key_of(ctx: ServiceContext, client: str, *scopes: str, tenant: str = DEFAULT_TENANT) -> str:
    """A real API key: a client of ``tenant`` (created first if need be) holding ``scopes``."""
    if tenant not in {t.name for t in list_tenants(ctx.engine)}:
        create_tenant(ctx, tenant)
    return create_client(ctx, client, tenant=tenant, scopes=scopes).api_key


class Browser:
    """A cookie-keeping client of an ASGI app or a transport, called synchronously (one event loop for its life)."""

    def __init__(self, app: Any, base_url: str = "http://authledger.test") -> None:
        self.loop = asyncio.new_event_loop()
        transport = app if isinstance(app, httpx.AsyncBaseTransport) else httpx.ASGITransport(app)
        self.client = httpx.AsyncClient(transport=transport, base_url=base_url)

    def request(self, method: str, path: str, **options: Any) -> httpx.Response:
        options.setdefault("follow_redirects", True)
        return self.loop.run_until_complete(self.client.request(method, path, **options))

    def get(self, path: str, **options: Any) -> httpx.Response:
        return self.request("GET", path, **options)

    def post(self, path: str, **options: Any) -> httpx.Response:
        return self.request("POST", path, **options)

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()
