"""The one exception tree of authledger.

Every error a user can see derives from ``AuthledgerError``. Each subclass's
docstring is its default message, and each is mapped once, here, to an HTTP
status and a CLI exit code, so the HTTP API and the CLI agree on what went
wrong without a table of their own. Errors that only infrastructure raises
(an unreachable database, a broken seal, a busy projection) live in
``infra/errors.py`` and derive from the same root.
"""

from __future__ import annotations

from datetime import datetime


class AuthledgerError(Exception):
    """Something went wrong in authledger."""

    http_status = 500
    exit_code = 1
    problem_type = "about:blank"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0])


class ConfigError(AuthledgerError):
    """The configuration is invalid."""

    exit_code = 78  # EX_CONFIG
    problem_type = "config-error"


class ConcurrencyConflict(AuthledgerError):
    """Too many concurrent changes to the same records; try again."""

    # Writers of one stream are serialised, and a conflict left over is retried
    # before it gets here: reaching a user, it is a temporary failure (503),
    # not a conflict in what they asked for (409).
    http_status = 503
    exit_code = 75  # EX_TEMPFAIL
    problem_type = "concurrency-conflict"


class UnknownEventType(AuthledgerError):
    """The log holds an event type this version of authledger does not know."""

    exit_code = 65  # EX_DATAERR
    problem_type = "unknown-event-type"


class InvalidInput(AuthledgerError):
    """The input is malformed."""

    http_status = 400
    exit_code = 2
    problem_type = "invalid-input"


class PurposeUnknown(InvalidInput):
    """The purpose is not one the tenant declared."""

    problem_type = "purpose-unknown"


class NotFound(AuthledgerError):
    """No such thing."""

    http_status = 404
    exit_code = 3
    problem_type = "not-found"


class Forbidden(AuthledgerError):
    """The API key is valid but lacks the scope this operation needs."""

    # Here, not in infra/errors.py: which scopes a key may grant is a domain
    # rule (domain.clients.check_grant).
    http_status = 403
    exit_code = 7  # like Unauthorized: the caller's credentials do not allow it
    problem_type = "forbidden"


class TokenInvalid(AuthledgerError):
    """The token is unknown, expired, superseded or already used."""

    http_status = 400
    exit_code = 4
    problem_type = "token-invalid"


class CodeRejected(AuthledgerError):
    """The code is wrong, expired, superseded or already used."""

    http_status = 400
    exit_code = 4
    problem_type = "code-rejected"

    def __init__(self, message: str | None = None, *, attempts_left: int = 0) -> None:
        super().__init__(message)
        self.attempts_left = attempts_left


class IdempotencyMismatch(AuthledgerError):
    """This idempotency key was already used with different parameters."""

    http_status = 422
    exit_code = 5
    problem_type = "idempotency-key-mismatch"


class LockedOut(AuthledgerError):
    """Too many failed attempts; this flow is locked."""

    http_status = 429
    exit_code = 6
    problem_type = "locked-out"

    def __init__(self, message: str | None = None, *, retry_at: datetime | None = None) -> None:
        super().__init__(message)
        self.retry_at = retry_at


class RecipientSuppressed(AuthledgerError):
    """The address is on the tenant's suppression list (it bounced for good, or its owner complained); nothing
    was sent. An admin of the tenant can lift the suppression."""

    # 422, as a create's other refusal of what it was asked (not 409: a create's 409 is "in flight, retry
    # after", and this one does not pass with time, only when an admin lifts it).
    http_status = 422
    exit_code = 14
    problem_type = "address-suppressed"
