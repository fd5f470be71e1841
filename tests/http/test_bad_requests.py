"""Bad requests get a specific RFC 9457 problem and write nothing; failures never show a traceback."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from attrs import evolve
from sqlalchemy import Engine

from infra.db.engine import Database
from infra.services import reset as reset_service
from infra.services.clients import create_client, revoke_client
from infra.logs import FIELDS
from infra.services.unit_of_work import ServiceContext
from tests.http.support import asgi_client, assert_problem, log_size

pytestmark = pytest.mark.anyio
ADA = {"user_id": "42", "email": "ada@example.com"}
CREATE = {"Idempotency-Key": "k", "Content-Type": "application/json"}


async def post_raw(api: httpx.AsyncClient, content: bytes, **headers: str) -> httpx.Response:
    return await api.post("/v1/password-resets", content=content, headers={**CREATE, **headers})


@pytest.fixture
async def written(engine: Engine, api: httpx.AsyncClient) -> AsyncIterator[None]:
    """Fails the test if anything was appended to the log after the client was made."""
    before = log_size(engine)
    yield
    assert log_size(engine) == before, "a rejected request wrote to the log"


@pytest.mark.usefixtures("written")
class TestBodies:
    async def test_malformed_json(self, api: httpx.AsyncClient) -> None:
        problem = assert_problem(await post_raw(api, b'{"user_id": "42",'), 400, "malformed-json")
        assert "not valid JSON" in problem["detail"]

    @pytest.mark.parametrize("content", [b"", b"\xff\xfe{}", b'{"user_id": NaN}', b'{"a": 1, "a": 2}'])
    async def test_not_strict_json(self, api: httpx.AsyncClient, content: bytes) -> None:
        assert_problem(await post_raw(api, content), 400, "malformed-json")

    @pytest.mark.parametrize("content", [b"[]", b'"text"', b"42", b"null"])
    async def test_a_body_that_is_not_an_object(self, api: httpx.AsyncClient, content: bytes) -> None:
        response = await post_raw(api, content)
        assert "must be a JSON object" in assert_problem(response, 400, "invalid-body")["detail"]

    async def test_wrong_types_unknown_and_missing_fields_are_all_named(self, api: httpx.AsyncClient) -> None:
        response = await api.post("/v1/password-resets", json={"user_id": 42, "admin": True}, headers=CREATE)
        problem = assert_problem(response, 400, "invalid-body")
        assert {error["pointer"] for error in problem["errors"]} == {"/user_id", "/admin", "/email"}
        assert "user_id must be a string" in problem["detail"] and "unknown field 'admin'" in problem["detail"]

    @pytest.mark.parametrize(
        "email",
        ["ada", "ada@", "@example.com", "ada@example", "ada @example.com", "ada@exa mple.com", "ada@-x.com",
         "a" * 65 + "@example.com", "ada@example.com\n", "ada@@example.com", "ada@" + "x" * 250 + ".com"],
    )
    async def test_invalid_email_addresses(self, api: httpx.AsyncClient, email: str) -> None:
        response = await api.post("/v1/password-resets", json={"user_id": "42", "email": email}, headers=CREATE)
        assert "email address" in assert_problem(response, 400, "invalid-email")["detail"]

    @pytest.mark.parametrize("user_id", ["", "has space", "tab\there", "x" * 201, "naïve"])
    async def test_invalid_user_ids(self, api: httpx.AsyncClient, user_id: str) -> None:
        response = await api.post("/v1/password-resets", json={**ADA, "user_id": user_id}, headers=CREATE)
        assert_problem(response, 400, "invalid-body")

    async def test_an_oversize_body_is_413_whatever_its_declared_length(self, api: httpx.AsyncClient) -> None:
        huge = b'{"user_id": "42", "email": "ada@example.com", "pad": "' + b"x" * 20_000 + b'"}'
        assert_problem(await post_raw(api, huge), 413, "body-too-large")

        async def stream() -> AsyncIterator[bytes]:  # chunked: no Content-Length to trust
            for _ in range(40):
                yield b" " * 1024

        response = await api.post("/v1/password-resets", content=stream(), headers=CREATE)
        assert_problem(response, 413, "body-too-large")

    @pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", ""])
    async def test_a_body_that_is_not_json_is_415(self, api: httpx.AsyncClient, content_type: str) -> None:
        body = b'{"user_id": "42", "email": "ada@example.com"}'
        response = await post_raw(api, body, **{"Content-Type": content_type})
        assert_problem(response, 415, "unsupported-media-type")


@pytest.mark.usefixtures("written")
class TestAuthentication:
    @pytest.mark.parametrize(
        "authorization",
        [None, "Bearer", "Basic dXNlcjpwYXNz", "Bearer alk_" + "A" * 43, "Bearer not-a-key", "bearer  "],
    )
    async def test_without_a_valid_key_every_operation_is_401(
        self, ctx: ServiceContext, authorization: str | None
    ) -> None:
        headers = {"Authorization": authorization} if authorization else {}
        async with asgi_client(ctx, None) as anonymous:
            for method, path, body in [
                ("POST", "/v1/password-resets", ADA), ("POST", "/v1/password-resets/verify", {"token": "x"}),
                ("POST", "/v1/password-resets/consume", {"token": "x"}), ("POST", "/v1/otp/challenges", ADA),
                ("POST", "/v1/otp/challenges/00000000-0000-0000-0000-000000000000/verify",
                 {"code": "123456", "user_id": "42"}),
                ("GET", "/v1/timeline?user_id=42", None),
            ]:
                response = await anonymous.request(method, path, json=body, headers={**CREATE, **headers})
                assert_problem(response, 401, "unauthorized")
                assert response.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.usefixtures("written")
class TestProtocol:
    async def test_an_unknown_path_is_a_404_problem(self, api: httpx.AsyncClient) -> None:
        assert_problem(await api.get("/v2/anything"), 404, "not-found")

    async def test_a_wrong_method_is_a_405_problem_with_allow(self, api: httpx.AsyncClient) -> None:
        response = await api.delete("/v1/password-resets")
        assert_problem(response, 405, "method-not-allowed")
        assert response.headers["Allow"] == "POST"

    @pytest.mark.parametrize("request_id", [b"has space", b"x" * 129, "é".encode()])
    async def test_a_malformed_request_id_is_400(self, api: httpx.AsyncClient, request_id: bytes) -> None:
        response = await api.get("/healthz", headers={"X-Request-Id": request_id})
        assert_problem(response, 400, "request-id-invalid")
        assert response.headers["X-Request-Id"].encode() != request_id

    async def test_every_response_carries_a_request_id(self, api: httpx.AsyncClient) -> None:
        assert len((await api.get("/healthz")).headers["X-Request-Id"]) == 32


async def test_an_unreachable_database_is_503_without_its_address(
    api_key: str, ctx: ServiceContext, caplog: pytest.LogCaptureFixture
) -> None:
    dead = Database("postgresql+psycopg://nobody@127.0.0.1:1/none").engine()  # translates as the real one does
    async with asgi_client(evolve(ctx, engine=dead), api_key) as api:
        response = await api.post("/v1/password-resets", json=ADA, headers=CREATE)
        ready = await api.get("/readyz")
    problem = assert_problem(response, 503, "database-unavailable", "database_unavailable")
    assert "127.0.0.1" not in response.text and "nobody" not in response.text
    assert problem["detail"] == "The database cannot be reached."
    assert response.headers["Retry-After"] == "1"
    assert problem["retry"].startswith("A retry with the same Idempotency-Key is safe: if this request was committed")
    assert "retry" not in assert_problem(ready, 503, "database-unavailable"), "a check has no key to retry with"
    logged = [getattr(r, FIELDS) for r in caplog.records if r.getMessage() == "request failed"]
    assert logged and "127.0.0.1" in logged[0]["error"], "the operator's log says which server"
    dead.dispose()


async def test_an_unexpected_failure_is_a_bare_500(
    api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("secret internals at /srv/app.py line 12")

    monkeypatch.setattr(reset_service, "request_reset", broken)
    response = await api.post("/v1/password-resets", json=ADA, headers=CREATE)

    problem = assert_problem(response, 500, "internal-error", "internal_error")
    assert "secret" not in response.text and "Traceback" not in response.text
    assert problem["detail"] == "Internal server error."
    assert "secret internals" in caplog.text, "the log keeps what the client is not told"
    [record] = [r for r in caplog.records if r.getMessage() == "unhandled error"]
    assert getattr(record, FIELDS)["request_id"] == response.headers["X-Request-Id"]


async def test_the_body_limit_is_configurable(ctx: ServiceContext, api_key: str) -> None:
    async with asgi_client(ctx, api_key, max_body_bytes=32) as api:
        response = await api.post("/v1/password-resets", json=ADA, headers=CREATE)
    assert "the limit is 32" in assert_problem(response, 413, "body-too-large")["detail"]


async def test_a_revoked_key_is_401_and_writes_nothing(ctx: ServiceContext, engine: Engine) -> None:
    key = create_client(ctx, "leaver").api_key
    revoke_client(ctx, "leaver")
    before = log_size(engine)
    async with asgi_client(ctx, key) as api:
        response = await api.post("/v1/password-resets", json=ADA, headers=CREATE)
    assert_problem(response, 401, "unauthorized")
    assert log_size(engine) == before


async def test_json_with_a_charset_parameter_is_json(api: httpx.AsyncClient) -> None:
    response = await api.post("/v1/password-resets", json=ADA,
                              headers={**CREATE, "Content-Type": "application/json; charset=utf-8"})
    assert response.status_code == 202
