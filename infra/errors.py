"""Errors that only infrastructure raises: the database, the seals, the projector, the API.

They derive from ``domain.errors.AuthledgerError`` like every other error, so
each carries its own HTTP status and CLI exit code, and the CLI and the HTTP
API map them without knowing which side of the house raised them.
"""

from __future__ import annotations

from datetime import datetime

from domain.errors import AuthledgerError
from domain.errors import Forbidden as Forbidden  # the API raises it too; its home is the domain's grant rule
from domain.limits import Quota


class DatabaseUnavailable(AuthledgerError):
    """The database cannot be reached."""

    http_status = 503
    exit_code = 69  # EX_UNAVAILABLE
    problem_type = "database-unavailable"
    problem_code = "database_unavailable"


class ReadOnlyStandby(DatabaseUnavailable):
    """The database is a read-only standby, not the primary: not ready for writes."""

    problem_type = "read-only-standby"
    problem_code = "read_only_standby"


class SchemaMismatch(AuthledgerError):
    """The database schema is missing or not the version this code expects."""

    http_status = 503
    exit_code = 69
    problem_type = "schema-mismatch"
    problem_code = "schema_mismatch"


class RequestInFlight(AuthledgerError):
    """A request with this idempotency key is still being processed."""

    http_status = 409
    exit_code = 75
    problem_type = "idempotency-key-in-flight"
    problem_code = "idempotency_key_in_flight"


class RateLimited(AuthledgerError):
    """Too many requests; try again later."""

    http_status = 429
    exit_code = 6
    problem_type = "rate-limited"
    problem_code = "rate_limited"

    def __init__(self, message: str | None = None, *, retry_at: datetime, quota: Quota | None = None) -> None:
        super().__init__(message)
        self.retry_at = retry_at
        self.quota = quota  # the limit that refused, for the RateLimit headers; None: not named


class Unauthorized(AuthledgerError):
    """A valid API key is required."""

    http_status = 401
    exit_code = 7
    problem_type = "unauthorized"
    problem_code = "unauthorized"


class TamperDetected(AuthledgerError):
    """The log no longer matches its hash-chain seals or a signed digest."""

    exit_code = 8
    problem_type = "tamper-detected"


class DigestInvalid(AuthledgerError):
    """The digest or export is corrupt, or its signature does not verify."""

    http_status = 422
    exit_code = 65  # EX_DATAERR
    problem_type = "digest-invalid"


class ProjectionBusy(AuthledgerError):
    """Another rebuild or verify of this projection is running."""

    http_status = 409
    exit_code = 75  # EX_TEMPFAIL: try again when it is done
    problem_type = "projection-busy"


class ProjectionMismatch(AuthledgerError):
    """A projection differs from a replay of the log."""

    exit_code = 9
    problem_type = "projection-mismatch"


class PersonalDataUnreadable(AuthledgerError):
    """An encrypted personal field does not decrypt: it was altered, or moved from another event or user."""

    exit_code = 65  # EX_DATAERR
    problem_type = "personal-data-unreadable"


class ReplayTargetExists(AuthledgerError):
    """The replay's target schema already exists."""

    exit_code = 10
    problem_type = "replay-target-exists"


class NothingSealed(AuthledgerError):
    """Nothing is sealed yet, so there is no chain to verify."""

    exit_code = 11
    problem_type = "nothing-sealed"


class KeyNotTrusted(AuthledgerError):
    """No trusted public key was given, and the key inside the file cannot vouch for itself."""

    exit_code = 12
    problem_type = "key-not-trusted"


class ApiProcessExited(AuthledgerError):
    """One of `serve`'s API processes exited on its own; the others were stopped."""

    exit_code = 70  # EX_SOFTWARE: a crash, as an internal error is; never an HTTP answer


class PortUnavailable(AuthledgerError):
    """`serve` cannot listen where it was asked to: the port is taken, or the address is not this host's."""

    exit_code = 69  # EX_UNAVAILABLE


class EmailsGivenUp(AuthledgerError):
    """`worker --once` gave up on at least one email (abandoned at the hard cap, or refused for good)."""

    exit_code = 13  # a command-line answer only, never an HTTP one
