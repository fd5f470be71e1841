"""The HTTP API and the command line refuse the same ids and keys, by the same rule (domain.input_checks)."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from infra.services.unit_of_work import ServiceContext
from tests.http.support import asgi_client, log_size
from tests.support.cli import Env, run_cli

pytestmark = pytest.mark.anyio

NON_ASCII = [
    ("user_id", ["--user-id", "üser"], {"user_id": "üser"}, {}),
    # The key goes as UTF-8 bytes on the wire.
    ("idempotency_key", ["--idempotency-key", "kéy"], {}, {"Idempotency-Key": "kéy".encode()}),
]


@pytest.mark.parametrize(("field", "options", "body", "headers"), NON_ASCII, ids=[case[0] for case in NON_ASCII])
@pytest.mark.parametrize("flow", ["reset", "otp"])
async def test_the_cli_and_the_api_both_refuse_non_ascii_ids_and_keys_and_write_nothing(
    env: Env, engine: Engine, ctx: ServiceContext, api_key: str, flow: str, field: str,
    options: list[str], body: dict[str, str], headers: dict[str, bytes],
) -> None:
    before = log_size(engine)
    given = {"user_id": "u1", "email": "ada@example.test", **body}
    path = "/v1/password-resets" if flow == "reset" else "/v1/otp/challenges"
    async with asgi_client(ctx, api_key) as api:
        answer = await api.post(path, json=given, headers={"Idempotency-Key": "k", **headers})
    assert answer.status_code == 400, answer.text

    words = [flow, "request", "--user-id", "u1", "--email", "ada@example.test", *options]
    result = run_cli(env, *words)
    assert result.exit_code == 2 and f"{field} must be printable ASCII" in result.stderr, result.output
    assert log_size(engine) == before


async def test_a_purpose_out_of_shape_is_refused_by_the_api_and_the_cli_when_verifying(
    env: Env, engine: Engine, ctx: ServiceContext, api_key: str
) -> None:
    before = log_size(engine)
    challenge = "00000000-0000-0000-0000-000000000000"
    async with asgi_client(ctx, api_key) as api:
        answer = await api.post(f"/v1/otp/challenges/{challenge}/verify",
                                json={"code": "123456", "user_id": "u1", "purpose": "lögin"})
    assert answer.status_code == 400, answer.text

    result = run_cli(env, "otp", "verify", "--user-id", "u1", "--purpose", "lögin", challenge, "123456")
    assert result.exit_code == 2 and "a purpose name is 1-64 of" in result.stderr, result.output
    assert log_size(engine) == before
