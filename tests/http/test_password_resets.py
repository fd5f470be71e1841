"""POST /v1/password-resets, /verify and /consume: the reset flow over HTTP."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
from attrs import evolve
from sqlalchemy import Engine, text

from domain.policy import ResetPolicy
from infra.services.clients import create_client
from infra.services.locks import IdempotencyLock
from infra.services.unit_of_work import ServiceContext
from tests.http.support import asgi_client, assert_problem, log_size, token_for
from tests.support.log_reading import email_event_types
from tests.support.replay import assert_projections_match_log

pytestmark = pytest.mark.anyio
ADA = {"user_id": "42", "email": "ada@example.com"}


async def create(
    api: httpx.AsyncClient, body: dict[str, str] = ADA, key: str = "key-1", **headers: str,
) -> httpx.Response:
    return await api.post("/v1/password-resets", json=body, headers={"Idempotency-Key": key, **headers})


async def test_a_reset_request_is_accepted_and_its_email_queued(api: httpx.AsyncClient, engine: Engine) -> None:
    response = await create(api)

    assert response.status_code == 202
    answer = response.json()
    assert set(answer) == {"request_id", "message_id", "expires_at", "reused"} and answer["reused"] is False
    assert email_event_types(engine, answer["message_id"]) == ["EmailQueued"]
    assert_projections_match_log(engine)


async def test_every_event_a_request_causes_carries_the_client_and_the_request_id(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    before = log_size(engine)
    response = await create(api, **{"X-Request-Id": "support-ticket-7"})

    assert response.headers["X-Request-Id"] == "support-ticket-7"
    with engine.connect() as connection:
        metadata = connection.execute(
            text("SELECT metadata FROM events ORDER BY global_position OFFSET :n"), {"n": before}
        ).scalars().all()
    assert len(metadata) >= 2, "the request and its email"
    for each in metadata:
        assert each["client"] == "shop" and each["request_id"] == "support-ticket-7"


async def test_a_replay_returns_exactly_the_first_response_marked_only_by_the_header_and_writes_nothing(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    first = await create(api)
    written = log_size(engine)

    again = await create(api)

    assert first.json()["reused"] is False and "Idempotency-Replayed" not in first.headers
    assert again.status_code == first.status_code == 202
    assert again.content == first.content, "the body byte for byte"
    assert again.headers["Idempotency-Replayed"] == "true"
    assert log_size(engine) == written


async def test_a_quoted_structured_field_key_is_the_same_key(api: httpx.AsyncClient) -> None:
    first = await create(api, key="abc-123")
    again = await create(api, key='"abc-123"')
    assert again.json() == first.json() and again.headers["Idempotency-Replayed"] == "true"


async def test_the_same_key_with_another_body_is_422_and_writes_nothing(api: httpx.AsyncClient, engine: Engine) -> None:
    await create(api)
    written = log_size(engine)

    response = await create(api, {"user_id": "42", "email": "someone-else@example.com"})

    assert_problem(response, 422, "idempotency-key-mismatch")
    assert log_size(engine) == written


async def test_keys_are_scoped_per_client(ctx: ServiceContext, api: httpx.AsyncClient, engine: Engine) -> None:
    first = await create(api, key="shared")
    async with asgi_client(ctx, create_client(ctx, "other-app").api_key) as other:
        response = await create(other, {"user_id": "42", "email": "other@example.com"}, key="shared")
    # Another client's key is its own: no mismatch, though the cooldown reuses nothing (other address).
    assert response.status_code == 202 and response.json()["request_id"] != first.json()["request_id"]


async def test_a_retry_while_the_first_is_in_flight_is_409_with_retry_after(
    api: httpx.AsyncClient, ctx: ServiceContext, engine: Engine
) -> None:
    lock = IdempotencyLock.for_request("reset", "shop", "42", "key-1", "wait")
    assert lock is not None
    written = log_size(engine)
    with engine.begin() as connection:
        lock.take(connection)  # the first request holds its key until its transaction ends
        response = await create(api)
    assert_problem(response, 409, "idempotency-key-in-flight", "idempotency_key_in_flight")
    assert response.headers["Retry-After"] == "1"
    assert log_size(engine) == written


@pytest.mark.parametrize(
    ("headers", "problem"),
    [({}, "idempotency-key-missing"), ({"Idempotency-Key": "x" * 256}, "idempotency-key-invalid"),
     ({"Idempotency-Key": "has space"}, "idempotency-key-invalid"),
     ({"Idempotency-Key": ""}, "idempotency-key-invalid")],
)
async def test_creates_need_a_well_formed_idempotency_key(
    api: httpx.AsyncClient, engine: Engine, headers: dict[str, str], problem: str
) -> None:
    written = log_size(engine)
    response = await api.post("/v1/password-resets", json=ADA, headers=headers)
    assert_problem(response, 400, problem)
    assert log_size(engine) == written


async def test_past_the_hourly_limit_is_429_with_retry_after(ctx: ServiceContext, api_key: str) -> None:
    strict = evolve(ctx, reset_policy=ResetPolicy(cooldown=timedelta(0), hourly_limit=1))
    async with asgi_client(strict, api_key) as api:
        assert (await create(api, key="a")).status_code == 202
        response = await create(api, key="b")
    problem = assert_problem(response, 429, "rate-limited")
    assert 3590 <= int(response.headers["Retry-After"]) <= 3600
    assert problem["retry_at"]


async def test_a_token_verifies_without_being_used_and_is_consumed_once(api: httpx.AsyncClient, engine: Engine) -> None:
    created = (await create(api)).json()
    token = token_for(engine, created["request_id"])

    for _ in range(2):
        verified = await api.post("/v1/password-resets/verify", json={"token": token})
        assert verified.status_code == 200
        assert verified.json() == {"valid": True, "request_id": created["request_id"], "user_id": "42",
                                   "expires_at": created["expires_at"]}
    consumed = await api.post("/v1/password-resets/consume", json={"token": token})
    assert consumed.status_code == 200
    assert consumed.json()["consumed"] is True and consumed.json()["request_id"] == created["request_id"]

    written = log_size(engine)
    again = await api.post("/v1/password-resets/consume", json={"token": token})
    problem = assert_problem(again, 400, "token-invalid")
    assert "already used" in problem["detail"] and token not in again.text
    assert_problem(await api.post("/v1/password-resets/verify", json={"token": token}), 400, "token-invalid")
    # Both presentations of the used link are on its request's stream, with who presented it.
    assert log_size(engine) == written + 2
    with engine.connect() as connection:
        rejected = connection.execute(text(
            "SELECT payload, metadata FROM events WHERE event_type = 'ResetTokenRejected' ORDER BY global_position"
        )).all()
    assert [(p["request_id"], p["reason"]) for p, _ in rejected] == [(created["request_id"], "used")] * 2
    assert all(m["client"] == "shop" and m["request_id"] for _, m in rejected), rejected
    assert_projections_match_log(engine)


@pytest.mark.parametrize("token", ["nope", "A" * 43, "A" * 512])
async def test_an_unknown_token_is_rejected(api: httpx.AsyncClient, token: str) -> None:
    for action in ("verify", "consume"):
        response = await api.post(f"/v1/password-resets/{action}", json={"token": token})
        assert_problem(response, 400, "token-invalid")
