"""Schema-driven fuzzing: requests generated from /openapi.json, valid and invalid, against the real app.

Bounded to 100 examples in all so that it runs in seconds: no response may
be a 5xx, and every response must match the document (status, media type,
headers, body).
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
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


def fuzz(ctx: ServiceContext, api_key: str, mode: GenerationMode, examples: int, checks: list) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(ctx))
    auth = {"Authorization": f"Bearer {api_key}"}

    @given(case=schema.as_strategy(generation_mode=mode))
    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    def every_response_conforms(case: schemathesis.Case) -> None:
        case.call_and_validate(headers={**(case.headers or {}), **auth}, checks=checks)

    every_response_conforms()


@pytest.mark.slow
def test_generated_valid_requests_get_documented_answers(ctx: ServiceContext, api_key: str) -> None:
    fuzz(ctx, api_key, GenerationMode.POSITIVE, 60, CONFORMANCE)


@pytest.mark.slow
def test_generated_invalid_requests_are_rejected_with_documented_problems(ctx: ServiceContext, api_key: str) -> None:
    fuzz(ctx, api_key, GenerationMode.NEGATIVE, 40, [*CONFORMANCE, negative_data_rejection])
