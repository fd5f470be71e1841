"""RFC 9457 problem details: the one place where an error becomes an HTTP response.

Every ``AuthledgerError`` already names its HTTP status and problem type
(``domain.errors``, ``infra.errors``); the errors below add the ones only the
HTTP edge can meet. ``problem_response`` turns any of them into
``application/problem+json`` with the class docstring as ``title``, the
message as ``detail`` and the error's stable ``code``, what a program
switches on (``infra.http.codes`` lists every code the API answers with).
Server-side failures (5xx) never show their message: it may name hosts or
internals, so the client gets the generic title and the log gets the rest.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

from starlette.responses import Response

from domain.errors import AuthledgerError, CodeRejected, ConcurrencyConflict, InvalidInput, LockedOut, NotFound
from domain.limits import Quota
from infra.errors import DatabaseUnavailable, RateLimited, RequestInFlight, Unauthorized

PROBLEM_JSON = "application/problem+json"
TYPE_PREFIX = "urn:authledger:problem:"
# A create holds its key for one short transaction: a second is plenty.
IN_FLIGHT_RETRY_AFTER_SECONDS = 1
# A failover manager promotes a standby within seconds; a client retrying sooner only meets more 503s.
UNAVAILABLE_RETRY_AFTER_SECONDS = 1
# A request may have committed before its connection broke (the COMMIT's
# answer lost): only its Idempotency-Key makes the retry safe, so a 503 on a
# request that carried one says so.
RETRY_WITH_THE_SAME_KEY = ("A retry with the same Idempotency-Key is safe: if this request was committed, the "
                           "retry returns its original answer, and it never creates a second one.")
TEMPORARY = (DatabaseUnavailable, ConcurrencyConflict)


class MalformedJson(InvalidInput):
    """The request body is not valid JSON."""

    problem_type = "malformed-json"
    problem_code = "malformed_json"


class InvalidBody(InvalidInput):
    """The request body does not match the operation's schema."""

    problem_type = "invalid-body"
    problem_code = "invalid_body"

    def __init__(self, message: str, *, errors: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or []


class InvalidEmail(InvalidBody):
    """The email address is not valid."""

    problem_type = "invalid-email"
    problem_code = "address_invalid"


class UserIdRefused(InvalidBody):
    """The user id may not be used: it holds an @ in some form."""

    problem_type = "user-id-refused"
    problem_code = "user_id_refused"


class InvalidQuery(InvalidInput):
    """The query string does not match the operation."""

    problem_type = "invalid-query"
    problem_code = "invalid_query"


class MissingIdempotencyKey(InvalidInput):
    """An Idempotency-Key header is required."""

    problem_type = "idempotency-key-missing"
    problem_code = "idempotency_key_missing"


class InvalidIdempotencyKey(InvalidInput):
    """The Idempotency-Key header is malformed."""

    problem_type = "idempotency-key-invalid"
    problem_code = "idempotency_key_invalid"


class InvalidRequestId(InvalidInput):
    """The X-Request-Id header is malformed."""

    problem_type = "request-id-invalid"
    problem_code = "request_id_invalid"


class BodyTooLarge(AuthledgerError):
    """The request body is too large."""

    http_status = 413
    problem_type = "body-too-large"
    problem_code = "body_too_large"


class RequestTimeout(AuthledgerError):
    """The request did not arrive in time."""

    # Answered with the connection closed: what is left of the request may still come, and would be misread
    # as the next one.
    http_status = 408
    problem_type = "request-timeout"
    problem_code = "request_timeout"


class UnsupportedMediaType(AuthledgerError):
    """The request body must be application/json."""

    http_status = 415
    problem_type = "unsupported-media-type"
    problem_code = "unsupported_media_type"


class MethodNotAllowed(AuthledgerError):
    """This method is not allowed on this resource."""

    http_status = 405
    problem_type = "method-not-allowed"
    problem_code = "method_not_allowed"


class RouteNotFound(NotFound):
    """No such resource."""


class InternalError(AuthledgerError):
    """Internal server error."""

    problem_type = "internal-error"
    problem_code = "internal_error"


def title_of(error_type: type[AuthledgerError]) -> str:
    return (error_type.__doc__ or "").strip().splitlines()[0].rstrip(".")


def problem_body(error: AuthledgerError, *, idempotency_key_given: bool = False) -> dict[str, Any]:
    status = error.http_status
    shown = status < 500 or (status == 503 and _safe_503(error))
    body: dict[str, Any] = {
        "type": TYPE_PREFIX + error.problem_type,
        "title": title_of(type(error)),
        "status": status,
        "detail": error.message if shown else title_of(type(error)) + ".",
        "code": error.code,
    }
    if isinstance(error, RateLimited | LockedOut) and error.retry_at is not None:
        body["retry_at"] = error.retry_at.isoformat()
    if isinstance(error, CodeRejected):
        body["attempts_left"] = error.attempts_left
    if isinstance(error, InvalidBody) and error.errors:
        body["errors"] = error.errors
    if isinstance(error, TEMPORARY) and idempotency_key_given:
        body["retry"] = RETRY_WITH_THE_SAME_KEY
    return body


def _safe_503(error: AuthledgerError) -> bool:
    # A schema mismatch tells an operator what to run; an outage message names
    # hosts, and the event store's conflict message names internal streams.
    # A standby's is its fixed title, and tells the operator where the writes went.
    return error.problem_type in {"schema-mismatch", "read-only-standby"}


def problem_response(error: AuthledgerError, *, now: datetime | None = None,
                     headers: dict[str, str] | None = None, idempotency_key_given: bool = False) -> Response:
    """The problem+json response for ``error``, with Retry-After and WWW-Authenticate where they apply.

    ``idempotency_key_given``: the request carried an Idempotency-Key, so a
    temporary failure's body says that retrying with it is safe.
    """
    headers = dict(headers or {})
    if isinstance(error, RateLimited | LockedOut) and error.retry_at is not None and now is not None:
        headers["Retry-After"] = str(max(1, math.ceil((error.retry_at - now).total_seconds())))
        if isinstance(error, RateLimited) and error.quota is not None:
            headers.update(rate_limit_headers(error.quota, remaining=0, reset_seconds=int(headers["Retry-After"])))
    if isinstance(error, ConcurrencyConflict):
        headers["Retry-After"] = "1"
    if isinstance(error, DatabaseUnavailable):
        headers["Retry-After"] = str(UNAVAILABLE_RETRY_AFTER_SECONDS)
    if isinstance(error, RequestInFlight):
        headers["Retry-After"] = str(IN_FLIGHT_RETRY_AFTER_SECONDS)
    if isinstance(error, Unauthorized):
        headers["WWW-Authenticate"] = 'Bearer realm="authledger"'
    if isinstance(error, RequestTimeout):
        headers["Connection"] = "close"
    return Response(safe_json(problem_body(error, idempotency_key_given=idempotency_key_given)),
                    status_code=error.http_status, headers=headers,
                    media_type=PROBLEM_JSON)


def rate_limit_headers(quota: Quota, *, remaining: int, reset_seconds: int) -> dict[str, str]:
    """The IETF ``RateLimit-Policy`` and ``RateLimit`` headers (draft-ietf-httpapi-ratelimit-headers) for ``quota``."""
    return {"RateLimit-Policy": f'"{quota.name}";q={quota.count};w={quota.window_seconds}',
            "RateLimit": f'"{quota.name}";r={max(0, remaining)};t={max(0, reset_seconds)}'}


# JSON escapes control characters; these three it leaves alone. Escaping them
# too means no value a caller sent comes back as markup, even if a client
# renders a response as HTML by mistake.
_MARKUP_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


def safe_json(data: Any) -> bytes:
    """Compact JSON with <, > and & escaped as \\u003c, \\u003e and \\u0026."""
    return json.dumps(data, separators=(",", ":")).translate(_MARKUP_ESCAPES).encode()
