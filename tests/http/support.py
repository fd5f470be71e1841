"""Helpers of the HTTP tests: an ASGI client, the secrets a test's email would carry, problem checks."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import Engine, text

from infra.http.app import create_app
from infra.http.codes import CATALOGUE
from infra.services.unit_of_work import ServiceContext
from tests.support.keys import TEST_KEYS
from tests.support.secrets import otp_code_of, reset_token_of

BASE_URL = "http://authledger.test"


def asgi_client(ctx: ServiceContext, api_key: str | None, **options: Any) -> httpx.AsyncClient:
    """A client of the whole ASGI stack of ``create_app(ctx)``, sending ``api_key`` if given."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    transport = httpx.ASGITransport(create_app(ctx, **options))
    return httpx.AsyncClient(transport=transport, base_url=BASE_URL, headers=headers)


def log_size(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(text("SELECT count(*) FROM events")).scalar_one()


def token_for(engine: Engine, request_id: str) -> str:
    """The token a reset email would carry (the tests' keys are fixed; the nonce is read from the log)."""
    return reset_token_of(engine, TEST_KEYS, request_id)


def code_for(engine: Engine, challenge_id: str) -> str:
    """The code the challenge's email would carry, of the length it was issued with."""
    return otp_code_of(engine, TEST_KEYS, challenge_id)


def wrong_code(engine: Engine, challenge_id: str) -> str:
    right = code_for(engine, challenge_id)
    return str((int(right) + 1) % 10 ** len(right)).zfill(len(right))


def assert_problem(response: httpx.Response, status: int, name: str, code: str | None = None) -> dict[str, Any]:
    """The RFC 9457 body of ``response``, checked to be of problem type ``name`` with ``status``, and to carry
    ``code`` (or, without, a code of the catalogue that goes with ``name`` and ``status``)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"] == f"urn:authledger:problem:{name}", problem
    assert problem["status"] == status and problem["title"] and problem["detail"]
    assert_code_of(problem, code)
    return problem


def assert_code_of(problem: dict[str, Any], code: str | None = None) -> None:
    """``problem`` carries ``code`` if given, and in any case a code the catalogue lists with its type and status."""
    if code is not None:
        assert problem["code"] == code, problem
    listed = {entry.code.name: entry for entry in CATALOGUE}
    entry = listed.get(problem["code"])
    assert entry is not None, f"{problem['code']!r} is not in the catalogue"
    assert (f"urn:authledger:problem:{entry.problem_type}", entry.status) == (problem["type"], problem["status"])
