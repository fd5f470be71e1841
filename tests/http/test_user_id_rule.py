"""A new user id never holds an email address: the API and the CLI refuse the same ids, in the same words.

A user id names the user's streams and projection rows for ever, where
`privacy forget` cannot reach it. So a create refuses an id holding an @ in
any form, and writes nothing; ids already in the log can still be looked up.
"""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import Engine

from domain.input_checks import user_id_problem
from tests.http.support import assert_problem, log_size
from tests.support.cli import Env, run_cli

pytestmark = pytest.mark.anyio
ADA = "ada@example.test"
REFUSED = {
    "address": "ada@example.com",
    "fullwidth-at": "ada＠example.com",
    "percent-encoded": "ada%40example.com",
    "encoded-twice": "ada%2540example.com",
    "html-reference": "ada&#64;example.com",
    "inside-a-longer-id": "crm-ada@example.com-7",
}
CREATES = {"/v1/password-resets": ["reset", "request"], "/v1/otp/challenges": ["otp", "request"]}


@pytest.fixture
def env(env: Env) -> Env:
    # The API's context allows many emails to one address, and the CLI shares its keys, so its count too.
    return {**env, "AUTHLEDGER_LIMIT_PER_ADDRESS": "100"}


def cli_create(env: Env, words: list[str], user_id: str) -> tuple[int, str]:
    result = run_cli(env, *words, "--user-id", user_id, "--email", ADA)
    return result.exit_code, result.output


@pytest.mark.parametrize("user_id", REFUSED.values(), ids=REFUSED.keys())
async def test_the_api_and_the_cli_refuse_an_id_holding_an_at_in_any_form_and_write_nothing(
    api: httpx.AsyncClient, engine: Engine, env: Env, user_id: str
) -> None:
    said = user_id_problem(user_id)
    assert said is not None
    before = log_size(engine)

    for path, words in CREATES.items():
        response = await api.post(path, json={"user_id": user_id, "email": ADA}, headers={"Idempotency-Key": "k"})
        problem = assert_problem(response, 400, "user-id-refused")
        assert problem["detail"] == f"user_id is refused: {said}"
        assert problem["errors"] == [{"pointer": "/user_id", "detail": problem["detail"]}]
        assert user_id not in response.text and "example.com" not in response.text

        exit_code, output = cli_create(env, words, user_id)
        assert (exit_code, output) == (2, f"Error: {said}\n")

    assert log_size(engine) == before


async def test_ids_without_an_at_are_still_accepted_by_both(
    api: httpx.AsyncClient, engine: Engine, env: Env
) -> None:
    for n, user_id in enumerate(["42", "auth0|5f7c8ec7", "100%", "a&b"]):
        response = await api.post("/v1/otp/challenges", json={"user_id": user_id, "email": ADA},
                                  headers={"Idempotency-Key": f"k{n}"})
        assert response.status_code == 202, response.text
        assert cli_create(env, CREATES["/v1/password-resets"], user_id)[0] == 0


async def test_the_document_tells_integrators_the_rule_where_creates_take_a_user_id(api: httpx.AsyncClient) -> None:
    document = (await api.get("/openapi.json")).json()
    schemas = document["components"]["schemas"]

    for name in ("PasswordResetCreate", "OtpChallengeCreate"):
        described = schemas[name]["properties"]["user_id"]["description"]
        assert "never an email address" in described and "`user-id-refused`" in described
    for path in CREATES:
        assert "`user-id-refused`" in document["paths"][path]["post"]["responses"]["400"]["description"]
