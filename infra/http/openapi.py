"""The OpenAPI 3.1 document served at /openapi.json, built from the schemas the server enforces."""

from __future__ import annotations

from typing import Any

from infra.http import schemas
from infra.http.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from infra.http.problems import PROBLEM_JSON

Json = dict[str, Any]


def _ref(name: str) -> Json:
    return {"$ref": f"#/components/schemas/{name}"}


REQUEST_ID_HEADER: Json = {
    "description": "The request's id: the X-Request-Id sent, or one made up. It is stored with every event "
                   "the request causes.",
    "schema": {"type": "string"},
}


def _json(status_description: str, schema_name: str, headers: Json | None = None) -> Json:
    response: Json = {
        "description": status_description,
        "headers": {"X-Request-Id": REQUEST_ID_HEADER, **(headers or {})},
        "content": {"application/json": {"schema": _ref(schema_name)}},
    }
    return response


def _problem(description: str, headers: Json | None = None) -> Json:
    return {
        "description": description,
        "headers": {"X-Request-Id": REQUEST_ID_HEADER, **(headers or {})},
        "content": {PROBLEM_JSON: {"schema": _ref("Problem")}},
    }


RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait.", "schema": {"type": "string"}}}
WWW_AUTHENTICATE = {"WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}}

COMMON_PROBLEMS = {
    "400": _problem("Malformed JSON, a body or query that does not match the schema, or a bad header "
                    "(`malformed-json`, `invalid-body`, `invalid-email`, `invalid-query`, `invalid-input`, "
                    "`request-id-invalid`)."),
    "401": _problem("No valid API key (`unauthorized`).", WWW_AUTHENTICATE),
    "500": _problem("An unexpected failure; no details are given (`internal-error`)."),
    "503": _problem("The database cannot be reached (`database-unavailable`, `schema-mismatch`)."),
}
WRITE_UNAVAILABLE = _problem(
    "The database cannot be reached (`database-unavailable`, `schema-mismatch`), or, rarely, concurrent "
    "requests for this user could not be put in order (`concurrency-conflict`, with Retry-After). Concurrent "
    "requests for one user are otherwise answered one after the other, never with a conflict.", RETRY_AFTER)
BODY_PROBLEMS = {
    "413": _problem("The body is larger than the limit (`body-too-large`)."),
    "415": _problem("The body is not application/json (`unsupported-media-type`)."),
}
CREATE_PROBLEMS = {
    "409": _problem("The first request with this Idempotency-Key is still being processed "
                    "(`idempotency-key-in-flight`); retry shortly."),
    "422": _problem("This Idempotency-Key was used with a different body (`idempotency-key-mismatch`)."),
    "429": _problem("Too many emails for this user and flow (`rate-limited`), or one-time codes are locked "
                    "for this user (`locked-out`).", RETRY_AFTER),
}

IDEMPOTENCY_KEY: Json = {
    "name": "Idempotency-Key", "in": "header", "required": True,
    "description": "Unique per intended request (e.g. a UUID), as a Structured Field string or bare. "
                   "A retry with the same key and body returns the first response; with another body, 422. "
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


def _operation(summary: str, operation_id: str, responses: Json, *, body: str | None = None,
               parameters: list[Json] | None = None, secured: bool = True) -> Json:
    responses = {"400": _problem("A malformed X-Request-Id (`request-id-invalid`)."), **responses}
    operation: Json = {
        "summary": summary, "operationId": operation_id,
        "parameters": [*(parameters or []), REQUEST_ID], "responses": responses,
    }
    if body:
        operation["requestBody"] = _body(body)
    if not secured:
        operation["security"] = []
    return operation


def _create(summary: str, operation_id: str, body: str, created: str) -> Json:
    responses = {
        "202": _json("Accepted: the email is queued (or this is a replay of the first answer).", created),
        **COMMON_PROBLEMS, **BODY_PROBLEMS, **CREATE_PROBLEMS, "503": WRITE_UNAVAILABLE,
    }
    return _operation(summary, operation_id, responses, body=body, parameters=[IDEMPOTENCY_KEY])


def _action(summary: str, operation_id: str, body: str, ok: str, ok_schema: str, *,
            rejected: str, extra: Json | None = None, parameters: list[Json] | None = None) -> Json:
    responses = {"200": _json(ok, ok_schema), **COMMON_PROBLEMS, **BODY_PROBLEMS, **(extra or {})}
    responses["400"] = _problem(responses["400"]["description"] + " " + rejected)
    return _operation(summary, operation_id, responses, body=body, parameters=parameters)


CHALLENGE_ID: Json = {"name": "challenge_id", "in": "path", "required": True, "schema": schemas.UUID}
TIMELINE_QUERY = [
    {"name": "user_id", "in": "query", "required": False, "schema": schemas.USER_ID,
     "description": "Every request, challenge and email of this user."},
    {"name": "request_id", "in": "query", "required": False, "schema": schemas.UUID,
     "description": "One reset request or OTP challenge and its emails."},
    {"name": "message_id", "in": "query", "required": False, "schema": schemas.UUID,
     "description": "One email and the request it serves."},
]


def openapi_document(*, max_body_bytes: int) -> Json:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "authledger",
            "version": "1",
            "description": "Password-reset links and email one-time codes, every action an event in an "
                           f"append-only log. Request bodies are JSON objects of at most {max_body_bytes} "
                           "bytes; unknown fields are rejected. Errors are RFC 9457 problem details whose "
                           "`type` is `urn:authledger:problem:<name>`.",
        },
        "security": [{"apiKey": []}],
        "paths": {
            "/v1/password-resets": {"post": _create(
                "Create a password-reset request and queue its email", "createPasswordReset",
                "PasswordResetCreate", "PasswordResetCreated")},
            "/v1/password-resets/verify": {"post": _action(
                "Check a reset token without using it", "verifyPasswordReset", "TokenBody",
                "The token is valid: the user may choose a new password.", "PasswordResetValid",
                rejected="An unknown, expired, replaced or used token is `token-invalid`.")},
            "/v1/password-resets/consume": {"post": _action(
                "Use a reset token once; the application then changes the password", "consumePasswordReset",
                "TokenBody", "Consumed: other open requests are superseded and a notice is queued.",
                "PasswordResetConsumed",
                rejected="An unknown, expired, replaced or used token is `token-invalid`.",
                extra={"503": WRITE_UNAVAILABLE})},
            "/v1/otp/challenges": {"post": _create(
                "Create an OTP challenge and queue the code's email", "createOtpChallenge",
                "OtpChallengeCreate", "OtpChallengeCreated")},
            "/v1/otp/challenges/{challenge_id}/verify": {"post": _action(
                "Check a code", "verifyOtpChallenge", "CodeBody", "The code is right; it cannot be used again.",
                "OtpVerified", parameters=[CHALLENGE_ID],
                rejected="A wrong, expired, replaced, used or locked code is `code-rejected`, with "
                         "`attempts_left`.",
                extra={"404": _problem("The challenge id is not a UUID (`not-found`)."),
                       "429": _problem("One-time codes are locked for this user (`locked-out`).", RETRY_AFTER),
                       "503": WRITE_UNAVAILABLE})},
            "/v1/timeline": {"get": _operation(
                "The events of a user, a request or a message, for support (exactly one query parameter)",
                "getTimeline",
                {"200": _json("The events, oldest first; the most recent 500 when `truncated`.", "Timeline"),
                 "404": _problem("No such request or message (`not-found`)."), **COMMON_PROBLEMS},
                parameters=TIMELINE_QUERY)},
            "/healthz": {"get": _operation(
                "The process is up", "health", {"200": _json("Up.", "Health")}, secured=False)},
            "/readyz": {"get": _operation(
                "The database is reachable and its schema current", "ready",
                {"200": _json("Ready.", "Ready"),
                 "503": _problem("Not ready (`database-unavailable`, `schema-mismatch`).")},
                secured=False)},
            "/metrics": {"get": _operation(
                "Prometheus metrics", "metrics",
                {"200": {"description": "Prometheus text exposition format 0.0.4.",
                         "headers": {"X-Request-Id": REQUEST_ID_HEADER},
                         "content": {METRICS_CONTENT_TYPE: {"schema": {"type": "string"}}}},
                 "503": COMMON_PROBLEMS["503"]},
                secured=False)},
            "/openapi.json": {"get": _operation(
                "This document", "openapi",
                {"200": {"description": "OpenAPI 3.1.", "headers": {"X-Request-Id": REQUEST_ID_HEADER},
                         "content": {"application/json": {"schema": {"type": "object"}}}}},
                secured=False)},
        },
        "components": {
            "securitySchemes": {"apiKey": {
                "type": "http", "scheme": "bearer",
                "description": "An API key from `authledger clients create NAME`.",
            }},
            "schemas": {
                "PasswordResetCreate": schemas.RESET_CREATE,
                "PasswordResetCreated": schemas.RESET_CREATED,
                "TokenBody": schemas.TOKEN_BODY,
                "PasswordResetValid": schemas.RESET_VALID,
                "PasswordResetConsumed": schemas.RESET_CONSUMED,
                "OtpChallengeCreate": schemas.OTP_CREATE,
                "OtpChallengeCreated": schemas.OTP_CREATED,
                "CodeBody": schemas.CODE_BODY,
                "OtpVerified": schemas.OTP_VERIFIED,
                "TimelineEvent": schemas.TIMELINE_EVENT,
                "Timeline": schemas.TIMELINE,
                "Health": schemas.HEALTH,
                "Ready": schemas.READY,
                "Problem": schemas.PROBLEM,
            },
        },
    }
