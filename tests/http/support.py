"""Helpers of the HTTP tests: an ASGI client, the secrets a test's email would carry, problem checks."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import httpx
from sqlalchemy import Engine, text

from domain.tokens import derive_otp_code, derive_reset_token
from infra.http.app import create_app
from infra.services.unit_of_work import ServiceContext
from tests.conftest import TEST_KEYS

BASE_URL = "http://authledger.test"


def asgi_client(ctx: ServiceContext, api_key: str | None, **options: Any) -> httpx.AsyncClient:
    """A client of the whole ASGI stack of ``create_app(ctx)``, sending ``api_key`` if given."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    transport = httpx.ASGITransport(create_app(ctx, **options))
    return httpx.AsyncClient(transport=transport, base_url=BASE_URL, headers=headers)


def log_size(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(text("SELECT count(*) FROM events")).scalar_one()


def token_for(request_id: str) -> str:
    """The token a reset email would carry (the tests' keys are fixed)."""
    return derive_reset_token(TEST_KEYS.current, UUID(request_id))


def code_for(challenge_id: str, digits: int = 6) -> str:
    return derive_otp_code(TEST_KEYS.current, UUID(challenge_id), digits)


def wrong_code(challenge_id: str) -> str:
    return f"{(int(code_for(challenge_id)) + 1) % 1_000_000:06d}"


def assert_problem(response: httpx.Response, status: int, name: str) -> dict[str, Any]:
    """The RFC 9457 body of ``response``, checked to be of problem type ``name`` with ``status``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"] == f"urn:authledger:problem:{name}", problem
    assert problem["status"] == status and problem["title"] and problem["detail"]
    return problem
