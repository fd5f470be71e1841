"""Fixtures of the HTTP tests: the API through its whole ASGI stack, on this test's database."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from infra.services.clients import create_client
from infra.services.unit_of_work import ServiceContext
from tests.http.support import asgi_client
from tests.support.browser import browser  # noqa: F401  (the one browser fixture, shared with tests/console)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def api_key(ctx: ServiceContext) -> str:
    """The key of a client named "shop"."""
    return create_client(ctx, "shop").api_key


@pytest.fixture
async def api(ctx: ServiceContext, api_key: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app that sends a valid API key (scopes send, verify and review)."""
    async with asgi_client(ctx, api_key) as client:
        yield client


@pytest.fixture
async def monitor(ctx: ServiceContext) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app that sends the key of "prometheus", which holds only the operator scope.

    The deployment's view of /metrics (every tenant, the worker, projection
    lag): a tenant's ``metrics`` key sees only its own tenant's series.
    """
    key = create_client(ctx, "prometheus", scopes=["operator"]).api_key
    async with asgi_client(ctx, key) as client:
        yield client
