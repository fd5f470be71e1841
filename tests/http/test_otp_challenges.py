"""POST /v1/otp/challenges and /v1/otp/challenges/{id}/verify: one-time codes over HTTP."""

from __future__ import annotations

import json
from datetime import timedelta
from uuid import uuid4

import httpx
import pytest
from attrs import evolve
from sqlalchemy import Engine, text

from domain.policy import OtpPolicy
from infra.services.unit_of_work import ServiceContext
from tests.http.support import asgi_client, assert_problem, code_for, log_size, wrong_code
from tests.support.log_reading import stream_events
from tests.support.replay import assert_projections_match_log

pytestmark = pytest.mark.anyio
ADA = {"user_id": "42", "email": "ada@example.com"}


async def challenge(api: httpx.AsyncClient, body: dict[str, str] = ADA, key: str = "otp-1") -> httpx.Response:
    return await api.post("/v1/otp/challenges", json=body, headers={"Idempotency-Key": key})


async def verify(api: httpx.AsyncClient, challenge_id: str, code: str) -> httpx.Response:
    return await api.post(f"/v1/otp/challenges/{challenge_id}/verify", json={"code": code, "user_id": "42"})


async def test_a_challenge_is_accepted_and_its_code_verifies_once(api: httpx.AsyncClient, engine: Engine) -> None:
    created = await challenge(api, {**ADA, "purpose": "step_up"})
    assert created.status_code == 202
    answer = created.json()
    assert set(answer) == {"challenge_id", "message_id", "expires_at", "reused"} and answer["reused"] is False
    [issued] = [e for e in stream_events(engine, "otp-user:42") if type(e).__name__ == "OtpChallengeIssued"]
    assert issued.purpose == "step_up" and issued.client == "shop"

    ok = await verify(api, answer["challenge_id"], code_for(engine, answer["challenge_id"]))
    assert ok.status_code == 200 and ok.json() == {"verified": True, "challenge_id": answer["challenge_id"]}

    again = await verify(api, answer["challenge_id"], code_for(engine, answer["challenge_id"]))
    problem = assert_problem(again, 400, "code-rejected")
    assert problem["attempts_left"] == 0 and problem["detail"] == "The code was already used."
    assert_projections_match_log(engine)


async def test_a_code_presented_again_after_use_is_recorded_with_the_client_and_the_request_id(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    challenge_id = (await challenge(api)).json()["challenge_id"]
    code = code_for(engine, challenge_id)
    assert (await verify(api, challenge_id, code)).status_code == 200
    written = log_size(engine)

    again = await api.post(f"/v1/otp/challenges/{challenge_id}/verify", json={"code": code, "user_id": "42"},
                           headers={"X-Request-Id": "replayed-1"})

    assert assert_problem(again, 400, "code-rejected")["detail"] == "The code was already used."
    assert log_size(engine) == written + 1
    with engine.connect() as connection:
        payload, metadata = connection.execute(text(
            "SELECT payload, metadata FROM events WHERE event_type = 'OtpCodeRejected'")).one()
    assert (payload["challenge_id"], payload["reason"]) == (challenge_id, "used")
    assert (metadata["client"], metadata["request_id"]) == ("shop", "replayed-1")
    assert code not in json.dumps([payload, metadata])
    assert_projections_match_log(engine)


async def test_the_purpose_defaults_to_login(api: httpx.AsyncClient, engine: Engine) -> None:
    assert (await challenge(api)).status_code == 202
    assert stream_events(engine, "otp-user:42")[-1].purpose == "login"


async def test_a_replay_returns_the_first_response_and_another_body_is_422(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    first = await challenge(api)
    written = log_size(engine)
    again = await challenge(api)
    assert "Idempotency-Replayed" not in first.headers
    assert again.content == first.content and again.headers["Idempotency-Replayed"] == "true"
    mismatch = await challenge(api, {**ADA, "purpose": "mfa"})
    assert_problem(mismatch, 422, "idempotency-key-mismatch")
    assert log_size(engine) == written


async def test_a_wrong_code_says_how_many_attempts_are_left_until_the_challenge_locks(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    challenge_id = (await challenge(api)).json()["challenge_id"]
    left = []
    for _ in range(5):
        answer = await verify(api, challenge_id, wrong_code(engine, challenge_id))
        problem = assert_problem(answer, 400, "code-rejected")
        left.append(problem["attempts_left"])
    assert left == [4, 3, 2, 1, 0]
    locked = await verify(api, challenge_id, code_for(engine, challenge_id))
    assert_problem(locked, 400, "code-rejected")


async def test_a_locked_account_is_429_with_retry_after(ctx: ServiceContext, api_key: str) -> None:
    strict = evolve(ctx, otp_policy=OtpPolicy(account_lock_threshold=2, account_lock_base=timedelta(minutes=15)))
    async with asgi_client(strict, api_key) as api:
        challenge_id = (await challenge(api)).json()["challenge_id"]
        for _ in range(2):
            await verify(api, challenge_id, wrong_code(ctx.engine, challenge_id))
        response = await verify(api, challenge_id, code_for(ctx.engine, challenge_id))
        problem = assert_problem(response, 429, "locked-out")
        assert int(response.headers["Retry-After"]) == 15 * 60 and problem["retry_at"]
        refused = await challenge(api, key="otp-2")
        assert_problem(refused, 429, "locked-out")


async def test_an_unknown_challenge_is_rejected_like_a_wrong_code(api: httpx.AsyncClient) -> None:
    assert_problem(await verify(api, str(uuid4()), "123456"), 400, "code-rejected")


async def test_a_challenge_id_that_is_not_a_uuid_is_404(api: httpx.AsyncClient) -> None:
    assert_problem(await verify(api, "not-a-uuid", "123456"), 404, "not-found")


@pytest.mark.parametrize("code", ["12345", "1234567", "12a456", 123456])
async def test_a_code_of_the_wrong_shape_is_400_and_writes_nothing(
    api: httpx.AsyncClient, engine: Engine, code: object
) -> None:
    challenge_id = (await challenge(api)).json()["challenge_id"]
    written = log_size(engine)
    response = await api.post(f"/v1/otp/challenges/{challenge_id}/verify", json={"code": code, "user_id": "42"})
    assert response.status_code == 400 and response.json()["type"].endswith(("invalid-input", "invalid-body"))
    assert log_size(engine) == written


async def test_verify_needs_the_user_id_and_a_body_without_it_writes_nothing(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    challenge_id = (await challenge(api)).json()["challenge_id"]
    written = log_size(engine)
    response = await api.post(f"/v1/otp/challenges/{challenge_id}/verify",
                              json={"code": code_for(engine, challenge_id)})
    assert response.status_code == 400 and "user_id" in response.text
    assert log_size(engine) == written


@pytest.mark.parametrize("named", [{"user_id": "43"}, {"user_id": "42", "purpose": "mfa"}],
                         ids=["another-user", "another-purpose"])
async def test_a_code_for_another_user_or_purpose_is_answered_as_an_unknown_challenge_and_costs_no_attempt(
    api: httpx.AsyncClient, engine: Engine, named: dict[str, str]
) -> None:
    challenge_id = (await challenge(api, {**ADA, "purpose": "step_up"})).json()["challenge_id"]
    written = log_size(engine)

    def told(response: httpx.Response) -> tuple[int, dict[str, object]]:
        return response.status_code, response.json()

    for code in (code_for(engine, challenge_id), wrong_code(engine, challenge_id)):
        mismatch = await api.post(f"/v1/otp/challenges/{challenge_id}/verify", json={"code": code, **named})
        unknown = await api.post(f"/v1/otp/challenges/{uuid4()}/verify", json={"code": code, **named})
        assert told(mismatch) == told(unknown)
        assert_problem(mismatch, 400, "code-rejected")

    assert log_size(engine) == written, "no attempt was counted"
    right = await api.post(f"/v1/otp/challenges/{challenge_id}/verify",
                           json={"code": code_for(engine, challenge_id), "user_id": "42", "purpose": "step_up"})
    assert right.status_code == 200
    assert_projections_match_log(engine)
