"""The document and the server agree: replays, canonical UUIDs, code lengths, huge numbers, statuses, links."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
import pytest
from attrs import evolve
from sqlalchemy import Engine

from infra.services.clients import create_client
from infra.services.unit_of_work import ServiceContext
from tests.http.support import asgi_client, assert_problem, code_for, log_size, wrong_code

pytestmark = pytest.mark.anyio
ADA = {"user_id": "42", "email": "ada@example.com"}


async def challenge(api: httpx.AsyncClient, key: str = "otp-1") -> str:
    response = await api.post("/v1/otp/challenges", json=ADA, headers={"Idempotency-Key": key})
    assert response.status_code == 202, response.text
    return response.json()["challenge_id"]


def non_canonical_forms(value: str) -> list[str]:
    return [f"{{{value}}}", f"urn:uuid:{value}", value.replace("-", ""), f" {value}", f"{value}\n"]


async def document(api: httpx.AsyncClient) -> dict[str, Any]:
    return (await api.get("/openapi.json")).json()


class TestReplays:
    async def test_a_repeat_within_the_cooldown_under_a_new_key_is_reused_but_not_a_replay(
        self, api: httpx.AsyncClient
    ) -> None:
        first = await api.post("/v1/password-resets", json=ADA, headers={"Idempotency-Key": "a"})
        repeat = await api.post("/v1/password-resets", json=ADA, headers={"Idempotency-Key": "b"})

        assert repeat.json() == {**first.json(), "reused": True}
        assert "Idempotency-Replayed" not in repeat.headers

        replay = await api.post("/v1/password-resets", json=ADA, headers={"Idempotency-Key": "b"})
        assert replay.json() == repeat.json() and replay.headers["Idempotency-Replayed"] == "true"


class TestCanonicalUuids:
    async def test_an_uppercase_challenge_id_is_the_same_challenge(
        self, api: httpx.AsyncClient, engine: Engine,
    ) -> None:
        challenge_id = await challenge(api)
        response = await api.post(f"/v1/otp/challenges/{challenge_id.upper()}/verify",
                                  json={"code": code_for(engine, challenge_id), "user_id": "42"})
        assert response.status_code == 200 and response.json()["challenge_id"] == challenge_id

    async def test_other_spellings_of_a_challenge_id_are_404_and_write_nothing(
        self, api: httpx.AsyncClient, engine: Engine
    ) -> None:
        challenge_id = await challenge(api)
        written = log_size(engine)
        for form in non_canonical_forms(challenge_id):
            response = await api.post(f"/v1/otp/challenges/{quote(form, safe='')}/verify",
                                      json={"code": wrong_code(engine, challenge_id), "user_id": "42"})
            assert "UUIDs like" in assert_problem(response, 404, "not-found")["detail"], form
        assert log_size(engine) == written

    @pytest.mark.parametrize("name", ["request_id", "message_id"])
    async def test_other_spellings_of_an_id_in_the_timeline_query_are_400(
        self, api: httpx.AsyncClient, name: str
    ) -> None:
        created = await api.post("/v1/password-resets", json=ADA, headers={"Idempotency-Key": "k"})
        known = created.json()[name]
        assert (await api.get("/v1/timeline", params={name: known.upper()})).status_code == 200
        for form in non_canonical_forms(known):
            response = await api.get("/v1/timeline", params={name: form})
            assert "canonical form" in assert_problem(response, 400, "invalid-query")["detail"], form


class TestCodeLength:
    async def test_a_code_of_another_length_than_the_challenges_is_400_and_costs_no_attempt(
        self, ctx: ServiceContext, engine: Engine
    ) -> None:
        key = create_client(ctx, "shop").api_key
        # Issued while AUTHLEDGER_OTP_DIGITS was 8; checked after it went back to 6.
        async with asgi_client(evolve(ctx, otp_policy=evolve(ctx.otp_policy, digits=8)), key) as api:
            challenge_id = await challenge(api)
        async with asgi_client(ctx, key) as api:
            written = log_size(engine)
            response = await api.post(f"/v1/otp/challenges/{challenge_id}/verify",
                                      json={"code": "123456", "user_id": "42"})
            assert assert_problem(response, 400, "invalid-input")["detail"] == "the code must be 8 digits"
            assert log_size(engine) == written

            right = await api.post(f"/v1/otp/challenges/{challenge_id}/verify",
                                   json={"code": code_for(engine, challenge_id), "user_id": "42"})
            assert right.status_code == 200

    async def test_the_document_states_the_length_rule(self, api: httpx.AsyncClient) -> None:
        code = (await document(api))["components"]["schemas"]["CodeBody"]["properties"]["code"]
        assert code["pattern"] == "^[0-9]{4,10}$" and "as many digits as the challenge" in code["description"]


class TestHugeNumbers:
    @pytest.mark.parametrize("number", ["1" * 5000, "-" + "9" * 5000, "1" * 101])
    async def test_a_huge_number_in_a_body_gets_a_plain_400(self, api: httpx.AsyncClient, number: str) -> None:
        response = await api.post("/v1/password-resets", content=f'{{"user_id": {number}}}'.encode(),
                                  headers={"Idempotency-Key": "k", "Content-Type": "application/json"})
        problem = assert_problem(response, 400, "malformed-json")
        assert problem["detail"] == "the body is not valid JSON: a number has more than 100 digits"

    @pytest.mark.parametrize("declared", ["9" * 5000, "0" * 5000 + "1"])
    async def test_a_huge_content_length_gets_a_plain_answer(self, api: httpx.AsyncClient, declared: str) -> None:
        response = await api.post("/v1/password-resets/verify", content=b'{"token": "t"}',
                                  headers={"Content-Type": "application/json", "Content-Length": declared})
        assert response.status_code in (400, 413), response.text
        assert "sys." not in response.text and "digits" not in response.text


class TestDocument:
    async def test_only_creates_can_answer_409_and_it_carries_retry_after(self, api: httpx.AsyncClient) -> None:
        paths = (await document(api))["paths"]
        with_409 = {path for path, item in paths.items() for op in item.values() if "409" in op["responses"]}
        assert with_409 == {"/v1/password-resets", "/v1/otp/challenges"}
        for path in with_409:
            conflict = paths[path]["post"]["responses"]["409"]
            assert "idempotency-key-in-flight" in conflict["description"]
            assert conflict["headers"]["Retry-After"]["required"] is True

    async def test_creates_document_reused_the_replay_header_and_links_to_verify(
        self, api: httpx.AsyncClient
    ) -> None:
        doc = await document(api)
        links = {}
        for path, created in [("/v1/password-resets", "PasswordResetCreated"),
                              ("/v1/otp/challenges", "OtpChallengeCreated")]:
            accepted = doc["paths"][path]["post"]["responses"]["202"]
            assert "Idempotency-Replayed" in accepted["headers"]
            assert "reused" in doc["components"]["schemas"][created]["required"]
            links.update({link["operationId"]: link.get("parameters") for link in accepted["links"].values()})
        assert links == {"verifyPasswordReset": None, "consumePasswordReset": None,
                         "verifyOtpChallenge": {"challenge_id": "$response.body#/challenge_id"}}

    async def test_every_secured_operation_documents_401_and_rate_limits_say_retry_after(
        self, api: httpx.AsyncClient
    ) -> None:
        for path, item in (await document(api))["paths"].items():
            for operation in item.values():
                responses = operation["responses"]
                assert ("401" in responses) == (operation.get("security") != []), path
                if "429" in responses:
                    assert "Retry-After" in responses["429"]["headers"], path

    async def test_the_timeline_takes_exactly_one_of_three_names(self, api: httpx.AsyncClient) -> None:
        [subject, _] = (await document(api))["paths"]["/v1/timeline"]["get"]["parameters"]
        assert (subject["in"], subject["style"], subject["explode"], subject["required"]) == (
            "query", "form", True, True)
        branches = subject["schema"]["oneOf"]
        assert [branch["required"] for branch in branches] == [["user_id"], ["request_id"], ["message_id"]]
        assert all(branch["additionalProperties"] is False for branch in branches)
