"""Schemathesis against the real app: the OpenAPI document is what the server does.

Requests are generated from /openapi.json and sent through the whole ASGI
stack onto this test's PostgreSQL. Every response must be documented (status,
media type, headers, body); no response may be a 5xx; a request the document
calls valid must be accepted and one it calls invalid rejected. The stateful
phase follows the document's links (create, then verify and timeline with the
id it answered). Examples are bounded so that the file runs in seconds.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from infra.http.app import create_app
from infra.services.unit_of_work import ServiceContext

CONFORMANCE = [
    not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
    response_schema_conformance,
]
# Answers that hang on what the server already holds, which no document can
# describe: whether a well-formed token or code is the one an email carried,
# and whether an Idempotency-Key was first sent with another body (422, as the
# IETF Idempotency-Key draft asks). A request the document calls valid may get
# exactly these problems, at these operations; any other 4xx outside
# Schemathesis's accepted statuses is still a failure. (Schemathesis grants
# the same to operations that mint credentials: CREDENTIAL_REJECTION_STATUSES.)
# Also answers to rules no JSON Schema can state, which the document gives in
# words at these operations: a user id holding an @ once percent-decoded
# (%40) is `user-id-refused`, and a purpose is valid only if the key's tenant
# declared it (`purpose-unknown`).
STATE_REJECTIONS = {
    "POST /v1/password-resets": {"idempotency-key-mismatch", "user-id-refused", "address-suppressed"},
    "POST /v1/otp/challenges": {"idempotency-key-mismatch", "user-id-refused", "purpose-unknown",
                                "address-suppressed"},
    "POST /v1/password-resets/verify": {"token-invalid"},
    "POST /v1/password-resets/consume": {"token-invalid"},
    # invalid-input: a code of another length than the challenge's own.
    "POST /v1/otp/challenges/{challenge_id}/verify": {"code-rejected", "invalid-input"},
    # A tenant's setting is held to its deployment-wide rule (an https URL, one plain address, a template's
    # placeholders), given in words: no JSON Schema states it whole.
    "PATCH /v1/admin/tenant": {"invalid-input"},
}
SETTINGS = settings(deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def valid_requests_are_accepted(ctx: Any, response: Any, case: schemathesis.Case) -> bool | None:
    """Schemathesis's positive_data_acceptance, but for the answers of ``STATE_REJECTIONS``."""
    if response.status_code in (400, 422) and _problem_name(response) in STATE_REJECTIONS.get(case.operation.label, ()):
        return None
    return positive_data_acceptance(ctx, response, case)


def _problem_name(response: Any) -> str:
    return str(response.json().get("type", "")).removeprefix("urn:authledger:problem:")


def api_schema(ctx: ServiceContext, api_key: str) -> Any:
    """The app's own document, loaded through the app, every request sent with the client's key."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(ctx))
    schema.config.update(headers={"Authorization": f"Bearer {api_key}"})
    return schema


def fuzz(ctx: ServiceContext, api_key: str, mode: GenerationMode, examples: int, checks: list) -> None:
    @given(case=api_schema(ctx, api_key).as_strategy(generation_mode=mode))
    @settings(SETTINGS, max_examples=examples)
    def every_response_conforms(case: schemathesis.Case) -> None:
        case.call_and_validate(checks=checks)

    every_response_conforms()


@pytest.mark.slow
def test_generated_valid_requests_are_accepted_with_documented_answers(ctx: ServiceContext, api_key: str) -> None:
    fuzz(ctx, api_key, GenerationMode.POSITIVE, 60, [*CONFORMANCE, valid_requests_are_accepted])


@pytest.mark.slow
def test_generated_invalid_requests_are_rejected_with_documented_problems(ctx: ServiceContext, api_key: str) -> None:
    fuzz(ctx, api_key, GenerationMode.NEGATIVE, 40, [*CONFORMANCE, negative_data_rejection])


@pytest.mark.slow
def test_linked_calls_from_create_to_verify_and_timeline_get_documented_answers(
    ctx: ServiceContext, api_key: str
) -> None:
    schema = api_schema(ctx, api_key)
    # Valid requests only: a create must succeed for its links to be followed.
    schema.config.generation.update(modes=[GenerationMode.POSITIVE])

    class Scenario(schema.as_state_machine()):  # type: ignore[misc]
        def validate_response(self, response: Any, case: schemathesis.Case, *args: Any, **kwargs: Any) -> None:
            case.validate_response(response, checks=[*CONFORMANCE, valid_requests_are_accepted])

    Scenario.run(settings=settings(SETTINGS, max_examples=15, stateful_step_count=6))
