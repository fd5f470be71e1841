"""Helpers of the console tests: sign in through the forms, read a page's CSRF token, scoped keys."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import httpx
from attrs import evolve
from sqlalchemy import Engine

from domain.clients import Caller
from infra.services.clients import authenticate

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(page: httpx.Response) -> str:
    found = CSRF.search(page.text)
    assert found, page.text
    return found.group(1)


def sign_in(client: Any, api_key: str) -> httpx.Response:
    """Open the sign-in page and submit ``api_key`` with its token, as a browser would."""
    form = client.get("/console/sign-in")
    return client.post("/console/sign-in", data={"csrf": csrf_of(form), "api_key": api_key}, follow_redirects=False)


def with_callers(**callers: Caller) -> Callable[[Engine, str], Caller | None]:
    """``authenticate``, with named clients given other scopes or tenants (until keys carry them)."""

    def find(engine: Engine, api_key: str) -> Caller | None:
        caller = authenticate(engine, api_key)
        if caller is None or caller.client not in callers:
            return caller
        return evolve(callers[caller.client], client=caller.client)

    return find


class Browser:
    """A cookie-keeping client of an ASGI app, called synchronously (one event loop for its life)."""

    def __init__(self, app: Any, base_url: str = "http://authledger.test") -> None:
        self.loop = asyncio.new_event_loop()
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url=base_url)

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
