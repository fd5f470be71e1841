"""The catalogue of problem codes: declared once by the errors, listed exactly by the OpenAPI document and the docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import infra.http.app  # noqa: F401  (every error class the server can raise, imported)
from domain.errors import AuthledgerError, Code, CodeRejected, InvalidInput, TokenInvalid
from domain.otp import CODE_REFUSALS
from domain.reset import LINK_REFUSALS
from infra.http.codes import CATALOGUE, CODES, catalogue, markdown_table
from infra.http.openapi import openapi_document

ROOT = Path(__file__).resolve().parents[2]
# What an integrator must be able to tell apart (issue 38), whatever else the catalogue holds.
REQUIRED = {"token_unknown", "token_expired", "token_used", "token_superseded", "token_invalidated", "code_wrong",
            "challenge_expired", "challenge_used", "challenge_superseded", "challenge_locked", "rate_limited",
            "address_invalid", "tenant_unknown", "invalid_input", "purpose_unknown", "unauthorized", "forbidden",
            "not_found", "idempotency_key_mismatch", "database_unavailable"}


def _every_error_class(root: type[AuthledgerError] = AuthledgerError) -> list[type[AuthledgerError]]:
    return [root, *(c for sub in root.__subclasses__() for c in _every_error_class(sub))]


def test_the_catalogue_holds_every_code_an_integrator_must_tell_apart_each_snake_case_and_once() -> None:
    assert REQUIRED <= set(CODES)
    assert len(CODES) == len(set(CODES))
    assert all(re.fullmatch(r"[a-z]+(_[a-z]+)*", code) for code in CODES)


def test_the_openapi_document_lists_exactly_the_catalogue_each_code_described() -> None:
    listed = openapi_document(max_body_bytes=16_384)["components"]["schemas"]["ProblemCode"]["oneOf"]

    assert [entry["const"] for entry in listed] == list(CODES)
    assert all(entry["description"] for entry in listed)


def test_every_reason_a_link_or_code_is_refused_for_has_a_code() -> None:
    assert set(LINK_REFUSALS) <= set(TokenInvalid.reasons)
    # A code presented while the whole account is locked is answered by LockedOut, `account_locked`.
    assert set(CODE_REFUSALS) - {"account_locked"} <= set(CodeRejected.reasons)


@pytest.mark.parametrize(("error", "reason", "code"), [
    (TokenInvalid, None, "token_unknown"), (TokenInvalid, "erased", "token_unknown"),
    (TokenInvalid, "expired", "token_expired"), (TokenInvalid, "used", "token_used"),
    (TokenInvalid, "superseded", "token_superseded"), (TokenInvalid, "invalidated", "token_invalidated"),
    (CodeRejected, None, "challenge_unknown"), (CodeRejected, "erased", "challenge_unknown"),
    (CodeRejected, "wrong", "code_wrong"), (CodeRejected, "locked", "challenge_locked"),
    (CodeRejected, "invalidated", "challenge_invalidated"),
])
def test_a_reason_becomes_its_code_and_erasure_reads_as_unknown(
    error: type[AuthledgerError], reason: str | None, code: str
) -> None:
    assert error("words", reason=reason).code == code


def test_a_reason_without_a_code_is_a_programming_error_not_a_silent_default() -> None:
    with pytest.raises(ValueError, match="no code for the reason 'mislaid'"):
        TokenInvalid(reason="mislaid")


def test_every_error_the_server_can_raise_answers_with_a_code_of_the_catalogue() -> None:
    uncatalogued = {cls.__name__: [c.name for c in cls.codes()] for cls in _every_error_class()
                    if not {c.name for c in cls.codes()} <= set(CODES)}
    assert uncatalogued == {}, "list the error in infra.http.codes.ANSWERED"


def test_one_code_cannot_be_given_two_meanings() -> None:
    class Elsewhere(InvalidInput):
        """Something else entirely."""

        problem_code = "invalid_input"

    with pytest.raises(ValueError, match="'invalid_input' is given two meanings"):
        catalogue((InvalidInput, Elsewhere))
    assert Elsewhere.codes() == (Code("invalid_input", "Something else entirely."),)


def test_the_http_api_reference_tables_the_catalogue_and_the_readme_says_to_switch_on_code() -> None:
    assert markdown_table() in (ROOT / "docs" / "http-api.md").read_text(), (
        "docs/http-api.md's problem codes table is infra.http.codes.markdown_table()")
    assert "switch on `code`" in (ROOT / "README.md").read_text()
    assert len(CATALOGUE) == len(CODES)
