"""Free text stored in clear holds no address in any form: the API, the CLI and the console refuse alike.

An erasure's reason stays in the log in clear, where `privacy forget` cannot
reach it. A reason holding an address (plain, fullwidth, percent-encoded),
an @ look-alike or bidirectional controls is refused in the same words over
HTTP and on the command line, and nothing is written. A user whose id
predates the user-id rule can still be erased.
"""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from domain.errors import InvalidInput
from domain.privacy import erasure_reason
from domain.reset import RequestReset
from infra.services.clients import create_client
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.http.support import asgi_client, assert_problem, log_size
from tests.support.cli import Env, run_cli

pytestmark = pytest.mark.anyio
ADA = "ada@example.test"
REASONS = {
    "address": "asked by ada@example.com",
    "fullwidth-at": "asked by ada＠example.com",
    "small-at": "asked by ada﹫example.com",
    "percent-encoded": "asked by ada%40example.com",
    "encoded-twice": "asked by ada%2540example.com",
    "right-to-left-override": "GDPR \u202e711-4202",
    "isolate": "GDPR \u2067request\u2069",
}


@pytest.fixture
def admin(ctx: ServiceContext) -> str:
    request_reset(ctx, RequestReset("42", ADA))
    return create_client(ctx, "ops", scopes=["admin"]).api_key


def said_by_the_domain(reason: str) -> str:
    with pytest.raises(InvalidInput) as refused:
        erasure_reason(reason)
    return refused.value.message


@pytest.mark.parametrize("reason", REASONS.values(), ids=REASONS.keys())
async def test_the_api_and_the_cli_refuse_a_reason_hiding_an_address_or_bidi_in_the_same_words(
    ctx: ServiceContext, engine: Engine, env: Env, admin: str, reason: str
) -> None:
    said = said_by_the_domain(reason)
    before = log_size(engine)

    async with asgi_client(ctx, admin) as api:
        response = await api.post("/v1/users/42/erasure", json={"reason": reason})
    cli_said = run_cli(env, "privacy", "forget", "--user-id", "42", "--reason", reason, "--yes")

    assert assert_problem(response, 400, "invalid-input")["detail"] == said
    assert (cli_said.exit_code, cli_said.output) == (2, f"Error: {said}\n")
    assert "example.com" not in response.text + cli_said.output
    assert log_size(engine) == before


async def test_an_actor_holding_an_address_is_refused_before_anything_is_written(
    engine: Engine, env: Env, admin: str
) -> None:
    before = log_size(engine)

    result = run_cli(env, "privacy", "forget", "--user-id", "42", "--reason", "GDPR 2024-117", "--yes", "--actor",
                     "ada%40example.com")

    assert result.exit_code == 2 and "the actor holds an email address" in result.output
    assert log_size(engine) == before


async def test_a_user_whose_id_predates_the_rule_can_still_be_erased(
    ctx: ServiceContext, engine: Engine, admin: str
) -> None:
    legacy = RequestReset("placeholder", ADA)
    object.__setattr__(legacy, "user_id", ADA)  # as a release before the rule wrote it, unchecked
    request_reset(ctx, legacy)

    async with asgi_client(ctx, admin) as api:
        response = await api.post(f"/v1/users/{ADA}/erasure", json={"reason": "GDPR request 2024-117"})

    assert response.status_code == 200, response.text
    assert response.json()["recorded"] is True and response.json()["key_ids"]
