"""POST /v1/users/{user_id}/erasure: an `admin` key erases a user of its own tenant, with a reason.

Until keys with scopes exist (the keys slice), every key holds the legacy
scopes, without `admin`: over HTTP that is a 403 that writes nothing. What an
admin key does is tested through ``erase_user``, the function the handler
runs once the key holds `admin`, and over HTTP with a real key whose scopes
are widened at the authentication seam; the test with a real admin key runs
as soon as ``create_client`` takes scopes.
"""

from __future__ import annotations

import inspect

import httpx
import pytest
from sqlalchemy import Engine

from domain.clients import Caller
from domain.errors import InvalidInput, NotFound
from domain.log import RecordedEvent
from domain.privacy import SubjectErased, subject_stream
from domain.reset import RequestReset
from infra.eventlog.personal_data import ERASED
from infra.eventlog.postgres import PostgresEventStore
from infra.services.clients import create_client
from infra.services.privacy import erase_user
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.http.support import asgi_client, assert_problem, log_size
from tests.support.log_reading import stream_events
from tests.support.replay import assert_projections_match_log

pytestmark = pytest.mark.anyio

ADA = "ada@example.com"
ADMIN = Caller("ops", "default", frozenset({"admin"}))
METADATA = {"client": "ops", "actor": "client:ops", "request_id": "r-1", "correlation_id": "r-1"}
REASON = {"reason": "GDPR request 2024-117"}


@pytest.fixture
def ada(ctx: ServiceContext) -> None:
    request_reset(ctx, RequestReset("42", ADA))


async def test_a_key_without_the_admin_scope_is_refused_and_nothing_is_written(
    ada: None, api: httpx.AsyncClient, engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    before = log_size(engine)

    response = await api.post("/v1/users/42/erasure", json=REASON)

    problem = assert_problem(response, 403, "forbidden")
    assert "'admin' scope" in problem["detail"]
    assert log_size(engine) == before and stream_events(engine, subject_stream("42")) == []
    assert ADA not in caplog.text


async def test_no_key_is_401_and_bad_input_is_refused_before_the_key_is_even_checked(
    ada: None, ctx: ServiceContext, api: httpx.AsyncClient, engine: Engine
) -> None:
    before = log_size(engine)
    async with asgi_client(ctx, None) as anonymous:
        assert_problem(await anonymous.post("/v1/users/42/erasure", json=REASON), 401, "unauthorized")
    assert_problem(await api.post("/v1/users/42/erasure", json={}), 400, "invalid-body")
    assert_problem(await api.post("/v1/users/42/erasure", json={"reason": ""}), 400, "invalid-body")
    assert_problem(await api.post("/v1/users/42/erasure", json={**REASON, "extra": 1}), 400, "invalid-body")
    assert_problem(await api.post("/v1/users/42/erasure", content=b"{", headers={"content-type": "application/json"}),
                   400, "malformed-json")
    assert_problem(await api.post("/v1/users/a%20b/erasure", json=REASON), 404, "not-found")
    assert log_size(engine) == before


def test_an_admin_erases_a_user_of_its_tenant_with_the_reason_and_its_client_on_record(
    ada: None, ctx: ServiceContext, engine: Engine
) -> None:
    erasure = erase_user(ctx, ADMIN, "42", REASON["reason"], METADATA)

    assert erasure.recorded and len(erasure.key_ids) == 1 and erasure.reason == REASON["reason"]
    [recorded] = _erasures(engine, "42")
    assert recorded.metadata["client"] == "ops" and recorded.metadata["request_id"] == "r-1"
    assert {e.recipient for e in stream_events(engine, "reset-user:42")} == {ERASED}
    assert_projections_match_log(engine)


def test_an_admin_of_another_tenant_finds_no_such_user_and_nothing_is_written(
    ada: None, ctx: ServiceContext, engine: Engine
) -> None:
    before = log_size(engine)
    with pytest.raises(NotFound, match="no user '42' of tenant 'acme'"):
        erase_user(ctx, Caller("ops", "acme", frozenset({"admin"})), "42", REASON["reason"], METADATA)
    with pytest.raises(NotFound, match="no user 'nobody'"):
        erase_user(ctx, ADMIN, "nobody", REASON["reason"], METADATA)
    with pytest.raises(InvalidInput, match="email address"):
        erase_user(ctx, ADMIN, "42", f"asked by {ADA}", METADATA)
    assert log_size(engine) == before
    assert {e.recipient for e in stream_events(engine, "reset-user:42")} == {ADA}, "still readable"


async def test_over_http_a_key_holding_admin_erases_with_its_client_on_record(
    ada: None, ctx: ServiceContext, api: httpx.AsyncClient, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handler's wiring, until admin keys exist: the real key of "shop", its scopes widened by `admin`."""
    import infra.http.api

    real = infra.http.api.authenticate

    def with_admin(engine: Engine, api_key: str) -> Caller | None:
        caller = real(engine, api_key)
        return Caller(caller.client, caller.tenant, caller.scopes | {"admin"}) if caller else None

    monkeypatch.setattr(infra.http.api, "authenticate", with_admin)

    response = await api.post("/v1/users/42/erasure", json=REASON, headers={"X-Request-Id": "ticket-117"})
    again = await api.post("/v1/users/42/erasure", json=REASON)
    unknown = await api.post("/v1/users/nobody/erasure", json=REASON)

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["user_id"] == "42" and body["recorded"] is True and body["reason"] == REASON["reason"]
    assert len(body["key_ids"]) == 1
    assert again.status_code == 200 and again.json()["recorded"] is False
    assert_problem(unknown, 404, "not-found")
    [recorded] = _erasures(engine, "42")
    assert recorded.metadata["client"] == "shop" and recorded.metadata["request_id"] == "ticket-117"
    timeline = (await api.get("/v1/timeline", params={"user_id": "42"})).text
    assert ADA not in timeline and "enc:v1:" not in timeline and ERASED in timeline


@pytest.mark.skipif("scopes" not in inspect.signature(create_client).parameters,
                    reason="needs an admin key: create_client(ctx, name, tenant=..., scopes=...) comes with the "
                           "keys slice")
async def test_over_http_an_admin_key_erases_and_the_timeline_then_reads_erased(
    ada: None, ctx: ServiceContext, engine: Engine
) -> None:
    admin = create_client(ctx, "ops", tenant="default", scopes=["admin"]).api_key  # type: ignore[call-arg]
    review = create_client(ctx, "support", tenant="default", scopes=["review"]).api_key  # type: ignore[call-arg]
    async with asgi_client(ctx, admin) as api:
        response = await api.post("/v1/users/42/erasure", json=REASON)
        again = await api.post("/v1/users/42/erasure", json=REASON)
        unknown = await api.post("/v1/users/nobody/erasure", json=REASON)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["user_id"] == "42" and body["recorded"] is True and body["reason"] == REASON["reason"]
    assert again.status_code == 200 and again.json()["recorded"] is False
    assert_problem(unknown, 404, "not-found")
    async with asgi_client(ctx, review) as api:
        timeline = (await api.get("/v1/timeline", params={"user_id": "42"})).json()
    assert ADA not in str(timeline) and "enc:v1:" not in str(timeline) and ERASED in str(timeline)
    assert _erasures(engine, "42")[0].metadata["client"] == "ops"


def _erasures(engine: Engine, user_id: str) -> list[RecordedEvent]:
    with engine.connect() as connection:
        return [r for r in PostgresEventStore(connection).load(subject_stream(user_id))
                if isinstance(r.event, SubjectErased)]
