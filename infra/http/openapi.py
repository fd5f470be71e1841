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
    "required": True,
    "schema": {"type": "string"},
}


def _json(status_description: str, schema_name: str, headers: Json | None = None, links: Json | None = None) -> Json:
    response: Json = {
        "description": status_description,
        "headers": {"X-Request-Id": REQUEST_ID_HEADER, **(headers or {})},
        "content": {"application/json": {"schema": _ref(schema_name)}},
    }
    if links:
        response["links"] = links
    return response


def _problem(description: str, headers: Json | None = None) -> Json:
    return {
        "description": description,
        "headers": {"X-Request-Id": REQUEST_ID_HEADER, **(headers or {})},
        "content": {PROBLEM_JSON: {"schema": _ref("Problem")}},
    }


def _retry_after(required: bool) -> Json:
    return {"Retry-After": {"description": "Seconds to wait before retrying.", "required": required,
                            "schema": {"type": "string", "pattern": "^[1-9][0-9]*$"}}}


WWW_AUTHENTICATE = {"WWW-Authenticate": {"description": "Bearer", "required": True, "schema": {"type": "string"}}}
REPLAYED_HEADER = {"Idempotency-Replayed": {
    "description": "Sent, as `true`, only when this answer replays the first answer to this Idempotency-Key.",
    "required": False, "schema": {"type": "string", "const": "true"},
}}
BAD_HEADER = "A malformed X-Request-Id (`request-id-invalid`)."
BAD_BODY = ("Malformed JSON or a body that does not match the schema (`malformed-json`, `invalid-body`, "
            "`invalid-email`).")

COMMON_PROBLEMS = {
    "401": _problem("No valid API key (`unauthorized`).", WWW_AUTHENTICATE),
    "500": _problem("An unexpected failure; no details are given (`internal-error`)."),
    "503": _problem("The database cannot be reached (`database-unavailable`, `schema-mismatch`)."),
}
WRITE_UNAVAILABLE = _problem(
    "The database cannot be reached (`database-unavailable`, `schema-mismatch`), or, rarely, concurrent "
    "requests for this user could not be put in order (`concurrency-conflict`, with Retry-After). Concurrent "
    "requests for one user are otherwise answered one after the other, never with a conflict.", _retry_after(False))
BODY_PROBLEMS = {
    "413": _problem("The body is larger than the limit (`body-too-large`)."),
    "415": _problem("The body is not application/json (`unsupported-media-type`)."),
}
CREATE_PROBLEMS = {
    "409": _problem("The first request with this Idempotency-Key is still being processed "
                    "(`idempotency-key-in-flight`); retry after `Retry-After` seconds.", _retry_after(True)),
    "422": _problem("This Idempotency-Key was used with a different body (`idempotency-key-mismatch`)."),
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


def _operation(summary: str, operation_id: str, responses: Json, *, body: str | None = None,
               parameters: list[Json] | None = None, secured: bool = True, bad_request: str = "") -> Json:
    """An operation; its 400 lists ``bad_request``'s problems after the malformed X-Request-Id every one has."""
    responses = {"400": _problem(f"{BAD_HEADER} {bad_request}".strip()), **responses}
    operation: Json = {
        "summary": summary, "operationId": operation_id,
        "parameters": [*(parameters or []), REQUEST_ID], "responses": responses,
    }
    if body:
        operation["requestBody"] = _body(body)
    if not secured:
        operation["security"] = []
    return operation


def _create(summary: str, operation_id: str, body: str, created: str, *, too_many: str, links: Json) -> Json:
    responses = {
        "202": _json("Accepted: the email is queued, or `reused` names the open request (see "
                     "`Idempotency-Replayed` for a replay of this key).", created, REPLAYED_HEADER, links),
        **COMMON_PROBLEMS, **BODY_PROBLEMS, **CREATE_PROBLEMS,
        "429": _problem(too_many, _retry_after(False)), "503": WRITE_UNAVAILABLE,
    }
    return _operation(summary, operation_id, responses, body=body, parameters=[IDEMPOTENCY_KEY],
                      bad_request=f"{BAD_BODY} A missing or malformed Idempotency-Key (`idempotency-key-missing`, "
                                  "`idempotency-key-invalid`).")


def _action(summary: str, operation_id: str, body: str, ok: str, ok_schema: str, *,
            rejected: str, extra: Json | None = None, parameters: list[Json] | None = None) -> Json:
    responses = {"200": _json(ok, ok_schema), **COMMON_PROBLEMS, **BODY_PROBLEMS, **(extra or {})}
    return _operation(summary, operation_id, responses, body=body, parameters=parameters,
                      bad_request=f"{BAD_BODY} {rejected}")


def _link(operation_id: str, description: str, parameters: Json | None = None) -> Json:
    link: Json = {"operationId": operation_id, "description": description}
    if parameters:
        link["parameters"] = parameters
    return link


RESET_LINKS: Json = {
    "VerifyToken": _link("verifyPasswordReset", "Check the token that the queued email carries."),
    "ConsumeToken": _link("consumePasswordReset", "Use the token that the queued email carries."),
}
OTP_LINKS: Json = {
    "VerifyCode": _link("verifyOtpChallenge", "Check the code that the queued email carries.",
                        {"challenge_id": "$response.body#/challenge_id"}),
}
CHALLENGE_ID: Json = {
    "name": "challenge_id", "in": "path", "required": True, "schema": schemas.UUID,
    "description": "The challenge_id of the created challenge; anything but a canonical UUID is a 404.",
}
USER_ID: Json = {
    "name": "user_id", "in": "path", "required": True, "schema": schemas.USER_ID,
    "description": "The application's id for the user, in the tenant of the API key; a malformed id is a 404.",
}
TIMELINE_QUERY: Json = {
    "name": "subject", "in": "query", "required": True, "style": "form", "explode": True,
    "schema": schemas.TIMELINE_QUERY,
    "description": "Exactly one of `user_id` (every request, challenge and email of this user), `request_id` "
                   "(one reset request or OTP challenge and its emails) or `message_id` (one email and the "
                   "request it serves), as `?user_id=42`. None, two or an unknown name is a 400 `invalid-query`.",
}


FORBIDDEN = _problem("The API key lacks the scope this operation needs (`forbidden`).")
CLIENT_NAME_PARAMETER: Json = {
    "name": "name", "in": "path", "required": True, "schema": schemas.CLIENT_NAME,
    "description": "The client's name. A client of another tenant, or a name no client can have, is a 404.",
}
MESSAGE_ID: Json = {
    "name": "message_id", "in": "path", "required": True, "schema": schemas.UUID,
    "description": "The message to send again. Another tenant's message, or anything but a canonical UUID, "
                   "is a 404.",
}
ADMIN_PROBLEMS = {**COMMON_PROBLEMS, "403": FORBIDDEN}
ADMIN_NOT_FOUND = _problem("No such client, key or message in this key's tenant (`not-found`).")


def _admin(summary: str, operation_id: str, ok: Json, *, body: str | None = None,
           parameters: list[Json] | None = None, not_found: bool = True, writes: bool = False,
           bad_request: str = "") -> Json:
    responses = {**ok, **ADMIN_PROBLEMS, **({"404": ADMIN_NOT_FOUND} if not_found else {})}
    if body:
        responses.update(BODY_PROBLEMS)
        bad_request = f"{BAD_BODY} {bad_request}".strip()
    if body or writes:
        responses["503"] = WRITE_UNAVAILABLE
    return _operation(summary, operation_id, responses, body=body, parameters=parameters, bad_request=bad_request)


ADMIN_PATHS: Json = {
    "/v1/admin/clients": {
        "get": _admin("Every key of this tenant's clients, live or revoked (never a key itself)", "listClients",
                      {"200": _json("The keys, by client.", "ApiKeys")}, not_found=False),
        "post": _admin("Create a client of this tenant; its first key is shown this once", "createClient",
                       {"201": _json("Created.", "IssuedKey")}, body="ClientCreate", not_found=False,
                       bad_request="A name already taken (`invalid-input`)."),
    },
    "/v1/admin/clients/{name}/rotate": {"post": _admin(
        "Issue another key for a client; its other keys stay live until revoked", "rotateClient",
        {"201": _json("Issued; the key is shown this once.", "IssuedKey")}, parameters=[CLIENT_NAME_PARAMETER],
        writes=True, bad_request="A client with no live key (`invalid-input`).")},
    "/v1/admin/clients/{name}/revoke": {"post": _admin(
        "Revoke one key (`key_id`) or every key of a client", "revokeClient",
        {"200": _json("Revoked; `key_ids` empty when they already were.", "KeysRevoked")}, body="KeyRevoke",
        parameters=[CLIENT_NAME_PARAMETER])},
    "/v1/admin/messages/{message_id}/redrive": {"post": _admin(
        "Send an abandoned or failed message again, with a reason recorded in the log", "redriveMessage",
        {"200": _json("Pending again; the worker reads the request fresh and skips it if it expired.",
                      "Redriven")}, body="Redrive", parameters=[MESSAGE_ID],
        bad_request="A message that is not abandoned or failed, or a reason that is blank or holds an "
                    "email address or control characters (`invalid-input`).")},
}


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
                "PasswordResetCreate", "PasswordResetCreated", links=RESET_LINKS,
                too_many="Too many reset emails for this user within the hour (`rate-limited`).")},
            "/v1/password-resets/verify": {"post": _action(
                "Check a reset token without using it", "verifyPasswordReset", "TokenBody",
                "The token is valid: the user may choose a new password.", "PasswordResetValid",
                rejected="An unknown, expired, replaced or used token is `token-invalid`; so is a token of "
                         "another tenant, word for word.")},
            "/v1/password-resets/consume": {"post": _action(
                "Use a reset token once; the application then changes the password", "consumePasswordReset",
                "TokenBody", "Consumed: other open requests are superseded and a notice is queued.",
                "PasswordResetConsumed",
                rejected="An unknown, expired, replaced or used token is `token-invalid`; so is a token of "
                         "another tenant, word for word.",
                extra={"503": WRITE_UNAVAILABLE})},
            "/v1/otp/challenges": {"post": _create(
                "Create an OTP challenge and queue the code's email", "createOtpChallenge",
                "OtpChallengeCreate", "OtpChallengeCreated", links=OTP_LINKS,
                too_many="Too many codes for this user within the hour (`rate-limited`), or one-time codes are "
                         "locked for this user (`locked-out`).")},
            "/v1/otp/challenges/{challenge_id}/verify": {"post": _action(
                "Check a code", "verifyOtpChallenge", "CodeBody", "The code is right; it cannot be used again.",
                "OtpVerified", parameters=[CHALLENGE_ID],
                rejected="A wrong, expired, replaced, used or locked code, or an unknown challenge, is "
                         "`code-rejected`, with `attempts_left`. A challenge of another user, of another "
                         "purpose than the one named, or of another tenant is answered exactly as an unknown "
                         "one and counts no attempt. A code with another number of digits than "
                         "the challenge's is `invalid-input` (\"the code must be 6 digits\") and is not "
                         "counted as an attempt.",
                extra={"404": _problem("The challenge id is not a canonical UUID (`not-found`)."),
                       "429": _problem("One-time codes are locked for this user (`locked-out`).",
                                       _retry_after(False)),
                       "503": WRITE_UNAVAILABLE})},
            "/v1/timeline": {"get": _operation(
                "The events of a user, a request or a message, for support (exactly one query parameter)",
                "getTimeline",
                {"200": _json("The events, oldest first; the most recent 500 when `truncated`.", "Timeline"),
                 "404": _problem("No such request or message (`not-found`); one of another tenant is "
                                 "answered the same way."), **COMMON_PROBLEMS},
                parameters=[TIMELINE_QUERY],
                bad_request="No, two or an unknown query parameter, or a malformed value (`invalid-query`).")},
            **ADMIN_PATHS,
            "/v1/users/{user_id}/erasure": {"post": _action(
                "Erase a user's personal data (crypto-shredding); needs the `admin` scope. Irreversible",
                "eraseUser", "ErasureBody",
                "Erased: the user's data keys are destroyed and their addresses read `[erased]` from now on; "
                "or, with `recorded: false`, they already were.", "Erasure", parameters=[USER_ID],
                rejected="A reason that is blank, over 500 characters or holds an email address is "
                         "`invalid-input`.",
                extra={"403": _problem("The API key lacks the `admin` scope (`forbidden`)."),
                       "404": _problem("No such user in the key's tenant: no data key and no events "
                                       "(`not-found`)."),
                       "503": WRITE_UNAVAILABLE})},
            "/healthz": {"get": _operation(
                "The process is up", "health", {"200": _json("Up.", "Health")}, secured=False)},
            "/readyz": {"get": {**_operation(
                "The database is reachable (without a key); with a `metrics` key, also that its schema is current",
                "ready",
                {"200": _json("Ready; `schema_version` only for a `metrics` key.", "Ready"),
                 "401": COMMON_PROBLEMS["401"], "403": FORBIDDEN,
                 "503": _problem("Not ready (`database-unavailable`; with a `metrics` key also "
                                 "`schema-mismatch`).")}),
                "security": [{}, {"apiKey": []}]}},
            "/metrics": {"get": _operation(
                "Prometheus metrics, for a key with the `metrics` scope (scrape with a bearer token)", "metrics",
                {"200": {"description": "Prometheus text exposition format 0.0.4.",
                         "headers": {"X-Request-Id": REQUEST_ID_HEADER},
                         "content": {METRICS_CONTENT_TYPE: {"schema": {"type": "string"}}}},
                 "401": COMMON_PROBLEMS["401"], "403": FORBIDDEN, "500": COMMON_PROBLEMS["500"],
                 "503": COMMON_PROBLEMS["503"]})},
            "/openapi.json": {"get": _operation(
                "This document", "openapi",
                {"200": {"description": "OpenAPI 3.1.", "headers": {"X-Request-Id": REQUEST_ID_HEADER},
                         "content": {"application/json": {"schema": {"type": "object"}}}}},
                secured=False)},
        },
        "components": {
            "securitySchemes": {"apiKey": {
                "type": "http", "scheme": "bearer",
                "description": "An API key from `authledger clients create NAME --scope SCOPE`. Each operation "
                               "needs one scope (send, verify, review, admin or metrics); a key without it "
                               "gets 403 `forbidden`.",
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
                "ErasureBody": schemas.ERASURE_BODY,
                "Erasure": schemas.ERASURE,
                "TimelineEvent": schemas.TIMELINE_EVENT,
                "Timeline": schemas.TIMELINE,
                "Health": schemas.HEALTH,
                "Ready": schemas.READY,
                "ClientCreate": schemas.CLIENT_CREATE,
                "KeyRevoke": schemas.KEY_REVOKE,
                "Redrive": schemas.REDRIVE,
                "IssuedKey": schemas.ISSUED_KEY,
                "ApiKey": schemas.API_KEY,
                "ApiKeys": schemas.API_KEYS,
                "KeysRevoked": schemas.KEYS_REVOKED,
                "Redriven": schemas.REDRIVEN,
                "Problem": schemas.PROBLEM,
            },
        },
    }
