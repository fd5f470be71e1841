"""The pieces the OpenAPI document (``infra.http.openapi``) is built of, and the shapes of its operations.

Headers, parameters and problem responses that many operations share, and
the functions that describe an operation: ``operation`` for any, and
``create_operation``, ``action_operation`` and ``admin_operation`` for the
kinds the API has many of, each with the problems that kind can answer.
"""

from __future__ import annotations

from typing import Any

from infra.http import schemas
from infra.http.problems import PROBLEM_JSON

Json = dict[str, Any]



def _ref(name: str) -> Json:
    return {"$ref": f"#/components/schemas/{name}"}


REQUEST_ID_HEADER: Json = {
    "description": "The request's id: the X-Request-Id sent, or one made up. It is stored with every event "
                   "the request causes.",
    "required": True,
    "schema": {"type": "string"},
}


def json_response(status_description: str, schema_name: str, headers: Json | None = None,
                  links: Json | None = None) -> Json:
    """A response whose body is the JSON of the schema ``schema_name``, with its ``headers`` and ``links``."""
    response: Json = {
        "description": status_description,
        "headers": {"X-Request-Id": REQUEST_ID_HEADER, **(headers or {})},
        "content": {"application/json": {"schema": _ref(schema_name)}},
    }
    if links:
        response["links"] = links
    return response


def problem(description: str, headers: Json | None = None) -> Json:
    """A problem+json response; ``description`` names the problem types it stands for."""
    return {
        "description": description,
        "headers": {"X-Request-Id": REQUEST_ID_HEADER, **(headers or {})},
        "content": {PROBLEM_JSON: {"schema": _ref("Problem")}},
    }


def retry_after(required: bool) -> Json:
    """The Retry-After header of a response that may (or must) carry it."""
    return {"Retry-After": {"description": "Seconds to wait before retrying.", "required": required,
                            "schema": {"type": "string", "pattern": "^[1-9][0-9]*$"}}}


def rate_limited_headers() -> Json:
    """Retry-After and the IETF RateLimit headers of a 429 (``infra.http.problems.rate_limit_headers``)."""
    return {**retry_after(True),
            "RateLimit-Policy": {"description": "The limit that refused: `\"name\";q=COUNT;w=SECONDS`.",
                                 "required": False, "schema": {"type": "string"}},
            "RateLimit": {"description": "What is left of it and when it resets: `\"name\";r=0;t=SECONDS`.",
                          "required": False, "schema": {"type": "string"}}}


WWW_AUTHENTICATE = {"WWW-Authenticate": {"description": "Bearer", "required": True, "schema": {"type": "string"}}}
REPLAYED_HEADER = {"Idempotency-Replayed": {
    "description": "Sent, as `true`, only when this answer replays the first answer to this Idempotency-Key.",
    "required": False, "schema": {"type": "string", "const": "true"},
}}
BAD_HEADER = "A malformed X-Request-Id (`request-id-invalid`)."
BAD_BODY = ("Malformed JSON or a body that does not match the schema (`malformed-json`, `invalid-body`, "
            "`invalid-email`).")

# Every call with a key is held to its key's and its tenant's request rates and to the tenant's turns in
# the API process (infra.http.fairness), before any work is done.
FAIRNESS_REFUSALS = ("Over this API key's or this tenant's request rate (`rate-limited`, with RateLimit-Policy "
                     "`per-key` or `per-tenant`), or too many of this tenant's requests in progress "
                     "(`tenant-busy`); retry after `Retry-After` seconds. Nothing was done.")
KEY_RATE_REFUSAL = ("Over this API key's request rate (`rate-limited`, with RateLimit-Policy `per-key`); retry "
                    "after `Retry-After` seconds.")


def too_many_requests(description: str, *, retry_after_required: bool = True) -> Json:
    """A 429 problem with Retry-After and the RateLimit headers; ``description`` names its problem types."""
    return problem(description, {**rate_limited_headers(), **retry_after(retry_after_required)})


COMMON_PROBLEMS = {
    "401": problem("No valid API key (`unauthorized`).", WWW_AUTHENTICATE),
    "429": too_many_requests(FAIRNESS_REFUSALS),
    "500": problem("An unexpected failure; no details are given (`internal-error`)."),
    "503": problem("The database cannot be reached (`database-unavailable`, `schema-mismatch`)."),
}
WRITE_UNAVAILABLE = problem(
    "The database cannot be reached (`database-unavailable`, with Retry-After, `schema-mismatch`), or, rarely, "
    "concurrent requests for this user could not be put in order (`concurrency-conflict`, with Retry-After). "
    "Concurrent requests for one user are otherwise answered one after the other, never with a conflict. The "
    "request may have been committed before the connection broke: its `retry` says that a retry with the same "
    "Idempotency-Key is safe and returns the original answer if it was.", retry_after(False))
BODY_PROBLEMS = {
    "408": problem("The body did not arrive within the deadline (`request-timeout`, setting "
                   "`AUTHLEDGER_HTTP_BODY_TIMEOUT`); the connection is closed and nothing is written."),
    "413": problem("The body is larger than the limit (`body-too-large`)."),
    "415": problem("The body is not application/json (`unsupported-media-type`)."),
}
CREATE_PROBLEMS = {
    "409": problem("The first request with this Idempotency-Key is still being processed "
                   "(`idempotency-key-in-flight`); retry after `Retry-After` seconds.", retry_after(True)),
    "422": problem("This Idempotency-Key was used with a different body (`idempotency-key-mismatch`), or the "
                   "address is on the tenant's suppression list because it bounced for good or its owner "
                   "complained (`address-suppressed`); nothing was sent or written, and only an admin lifting "
                   "the suppression lets a create to it through."),
}

IDEMPOTENCY_KEY: Json = {
    "name": "Idempotency-Key", "in": "header", "required": True,
    "description": "Unique per intended request (e.g. a UUID), as a Structured Field string or bare. "
                   "A retry with the same key and body returns the first response, marked with "
                   "`Idempotency-Replayed: true`; with another body, 422. "
                   "Keys are scoped to the client and the user and kept for at least 24 hours.",
    "schema": {"type": "string", "pattern": schemas.IDEMPOTENCY_KEY_PATTERN},
}
REQUEST_ID: Json = {
    "name": "X-Request-Id", "in": "header", "required": False,
    "description": "Your id for this request, recorded in the metadata of every event it causes.",
    "schema": {"type": "string", "pattern": schemas.REQUEST_ID_PATTERN},
}


def _body(schema_name: str) -> Json:
    return {"required": True, "content": {"application/json": {"schema": _ref(schema_name)}}}


def operation(summary: str, operation_id: str, responses: Json, *, body: str | None = None,
              parameters: list[Json] | None = None, secured: bool = True, bad_request: str = "") -> Json:
    """An operation; its 400 lists ``bad_request``'s problems after the malformed X-Request-Id every one has."""
    responses = {"400": problem(f"{BAD_HEADER} {bad_request}".strip()), **responses}
    described: Json = {
        "summary": summary, "operationId": operation_id,
        "parameters": [*(parameters or []), REQUEST_ID], "responses": responses,
    }
    if body:
        described["requestBody"] = _body(body)
    if not secured:
        described["security"] = []
    return described


USER_ID_REFUSED = ("A user id holding an @ in any form, also percent-encoded or as an HTML reference "
                   "(`user-id-refused`).")


def create_operation(summary: str, operation_id: str, body: str, created: str, *, too_many: str,
                     links: Json, refused: str = "") -> Json:
    """A POST that creates a request and queues its email: 202, under an Idempotency-Key, rate-limited.

    Its 400 also lists ``USER_ID_REFUSED`` and ``refused``, what else the operation refuses.
    """
    responses = {
        "202": json_response("Accepted: the email is queued, or `reused` names the open request (see "
                             "`Idempotency-Replayed` for a replay of this key).", created, REPLAYED_HEADER, links),
        **COMMON_PROBLEMS, **BODY_PROBLEMS, **CREATE_PROBLEMS,
        "429": too_many_requests(f"{too_many} {FAIRNESS_REFUSALS}", retry_after_required=False),
        "503": WRITE_UNAVAILABLE,
    }
    return operation(summary, operation_id, responses, body=body, parameters=[IDEMPOTENCY_KEY],
                     bad_request=" ".join(filter(None, [
                         BAD_BODY, USER_ID_REFUSED, refused, "A missing or malformed Idempotency-Key "
                         "(`idempotency-key-missing`, `idempotency-key-invalid`)."])))


def action_operation(summary: str, operation_id: str, body: str, ok: str, ok_schema: str, *,
                     rejected: str, extra: Json | None = None, parameters: list[Json] | None = None) -> Json:
    """A POST that acts on a token or code: 200 with ``ok_schema``; ``rejected`` is what its 400 also means."""
    responses = {"200": json_response(ok, ok_schema), **COMMON_PROBLEMS, **BODY_PROBLEMS, **(extra or {})}
    return operation(summary, operation_id, responses, body=body, parameters=parameters,
                     bad_request=f"{BAD_BODY} {rejected}")


def link(operation_id: str, description: str, parameters: Json | None = None) -> Json:
    """A link from a response to the operation ``operation_id`` that follows it."""
    described: Json = {"operationId": operation_id, "description": description}
    if parameters:
        described["parameters"] = parameters
    return described


FORBIDDEN = problem("The API key lacks the scope this operation needs (`forbidden`).")
ADMIN_PROBLEMS = {**COMMON_PROBLEMS, "403": FORBIDDEN}
ADMIN_NOT_FOUND = problem("No such client, key or message in this key's tenant (`not-found`).")


def admin_operation(summary: str, operation_id: str, ok: Json, *, body: str | None = None,
                    parameters: list[Json] | None = None, not_found: bool = True, writes: bool = False,
                    bad_request: str = "", forbidden: str = "") -> Json:
    """An operation for an ``admin`` key (403 without, or for what ``forbidden`` says), within its tenant
    (404 for what it cannot see)."""
    responses = {**ok, **ADMIN_PROBLEMS, **({"404": ADMIN_NOT_FOUND} if not_found else {})}
    if forbidden:
        responses["403"] = problem(f"The API key lacks the `admin` scope, or {forbidden} (`forbidden`); "
                                   "nothing is written.")
    if body:
        responses.update(BODY_PROBLEMS)
        bad_request = f"{BAD_BODY} {bad_request}".strip()
    if body or writes:
        responses["503"] = WRITE_UNAVAILABLE
    return operation(summary, operation_id, responses, body=body, parameters=parameters, bad_request=bad_request)
