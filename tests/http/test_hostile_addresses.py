"""Every hostile address is refused by both create endpoints with the domain's rule, and nothing is written."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import Engine

from tests.http.support import assert_problem, log_size
from tests.support.addresses import ACCEPTED, HOSTILE, assert_mentions_no_address
from tests.support.replay import assert_projections_match_log

pytestmark = pytest.mark.anyio
CREATES = {
    "reset": ("/v1/password-resets", {}),
    "otp": ("/v1/otp/challenges", {"purpose": "login"}),
}


@pytest.mark.parametrize("create", list(CREATES))
@pytest.mark.parametrize("address", HOSTILE)
async def test_a_hostile_address_is_400_invalid_email_and_writes_nothing(
    api: httpx.AsyncClient, engine: Engine, create: str, address: str
) -> None:
    path, extra = CREATES[create]
    before = log_size(engine)

    response = await api.post(path, json={"user_id": "42", "email": address, **extra},
                              headers={"Idempotency-Key": "hostile-1"})

    problem = assert_problem(response, 400, "invalid-email")
    assert problem["detail"].startswith("email must be a single plain email address like name@example.com: ")
    assert [error["pointer"] for error in problem["errors"]] == ["/email"]
    assert_mentions_no_address(response.text, address)
    assert log_size(engine) == before


@pytest.mark.parametrize("address", ACCEPTED)
async def test_an_accepted_address_is_recorded_as_given(api: httpx.AsyncClient, engine: Engine, address: str) -> None:
    response = await api.post("/v1/password-resets", json={"user_id": "42", "email": address},
                              headers={"Idempotency-Key": "accepted-1"})

    assert response.status_code == 202, response.text
    assert_projections_match_log(engine)
