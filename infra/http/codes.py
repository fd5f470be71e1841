"""The catalogue of problem codes: every ``code`` a problem body of the HTTP API can carry, and what it means.

The codes themselves are declared once, by the errors (``problem_code``, or a
code per reason); this is the list of the errors the API answers with, which
the OpenAPI document and docs/http-api.md show. An error only the command
line meets is not here: reaching a caller, it would be what it is to them, an
``internal_error``.
"""

from __future__ import annotations

from attrs import frozen

from domain.errors import (
    AddressInvalid,
    AuthledgerError,
    RecipientSuppressed,
    Code,
    CodeRejected,
    ConcurrencyConflict,
    Forbidden,
    IdempotencyMismatch,
    InvalidInput,
    LockedOut,
    NotFound,
    PurposeUnknown,
    TenantUnknown,
    TokenInvalid,
)
from infra.errors import (
    DatabaseUnavailable,
    RateLimited,
    ReadOnlyStandby,
    RequestInFlight,
    SchemaMismatch,
    Unauthorized,
)
from infra.http.fairness import TenantBusy
from infra.http.problems import (
    BodyTooLarge,
    InternalError,
    InvalidBody,
    InvalidEmail,
    InvalidIdempotencyKey,
    InvalidQuery,
    InvalidRequestId,
    MalformedJson,
    MethodNotAllowed,
    MissingIdempotencyKey,
    RequestTimeout,
    UnsupportedMediaType,
    UserIdRefused,
)

# In the order the docs table reads best: what a link or code answers first, then limits, input, access, the rest.
ANSWERED: tuple[type[AuthledgerError], ...] = (
    TokenInvalid, CodeRejected, LockedOut, RateLimited, TenantBusy, RecipientSuppressed,
    InvalidInput, MalformedJson, InvalidBody, AddressInvalid, InvalidEmail, UserIdRefused, PurposeUnknown,
    TenantUnknown, InvalidQuery, MissingIdempotencyKey, InvalidIdempotencyKey, InvalidRequestId,
    IdempotencyMismatch, RequestInFlight,
    Unauthorized, Forbidden, NotFound, MethodNotAllowed, RequestTimeout, BodyTooLarge, UnsupportedMediaType,
    InternalError, ConcurrencyConflict, DatabaseUnavailable, ReadOnlyStandby, SchemaMismatch,
)


@frozen
class Listed:
    """One code of the catalogue, with the status and problem type it comes with."""

    code: Code
    status: int
    problem_type: str


def catalogue(answered: tuple[type[AuthledgerError], ...] = ANSWERED) -> tuple[Listed, ...]:
    """The codes ``answered`` can carry, each once, in the order the errors are given.

    ``ValueError`` when two errors give one code different meanings, statuses or types: a code means one thing.
    """
    listed: dict[str, Listed] = {}
    for error_type in answered:
        for code in error_type.codes():
            entry = Listed(code, error_type.http_status, error_type.problem_type)
            if listed.setdefault(code.name, entry) != entry:
                raise ValueError(f"the code {code.name!r} is given two meanings")
    return tuple(listed.values())


CATALOGUE = catalogue()
CODES = tuple(listed.code.name for listed in CATALOGUE)


def markdown_table() -> str:
    """The catalogue as docs/http-api.md shows it."""
    rows = [f"| `{listed.code.name}` | {listed.status} | `{listed.problem_type}` | {listed.code.meaning} |"
            for listed in CATALOGUE]
    return "\n".join(["| code | status | type | meaning |", "|---|---|---|---|", *rows]) + "\n"
