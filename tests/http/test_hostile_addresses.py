"""Every hostile address is refused by both create endpoints with the domain's rule, and nothing is written."""

from __future__ import annotations

import string

import httpx
import jsonschema_rs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine

from domain.addresses import address_problem
from infra.http import schemas
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


# What the document says and what the server does must agree: a generator of
# examples (Schemathesis) reads the schema, the server asks the domain.
document_says = jsonschema_rs.Draft202012Validator(schemas.EMAIL).is_valid
ADDRESS_ALPHABET = string.ascii_letters[:6] + string.digits[:3] + "@.-=?_+'\",;:<> \r\n()[]\\\u0430\u202e"
address_like = st.one_of(
    st.text(alphabet=ADDRESS_ALPHABET, max_size=30),
    st.builds("{}@{}".format, st.text(alphabet="ab.=?-", min_size=0, max_size=70),
              st.text(alphabet="ab.-9", min_size=0, max_size=20)),
)


@pytest.mark.parametrize("address", [*HOSTILE, *ACCEPTED])
def test_the_document_and_the_domain_agree_on_the_corpus(address: str) -> None:
    assert document_says(address) == (address_problem(address) is None)


@settings(max_examples=2000, deadline=None, derandomize=True)
@given(address=address_like)
def test_the_document_and_the_domain_agree_on_address_like_text(address: str) -> None:
    assert document_says(address) == (address_problem(address) is None)
