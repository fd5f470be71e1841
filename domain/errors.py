"""The one exception tree of authledger.

Every error a user can see derives from ``AuthledgerError``. Each subclass's
docstring is its default message, and each is mapped once, here, to an HTTP
status, a CLI exit code and the stable ``code`` a problem body carries, so the
HTTP API and the CLI agree on what went wrong without a table of their own.
An error that stands for several answers an integrator must tell apart (a
link that expired, or was used) names a code per reason (``reasons``); the
reasons are the domain's own (``domain.reset.LINK_REFUSALS``,
``domain.otp.CODE_REFUSALS``). Errors that only infrastructure raises
(an unreachable database, a broken seal, a busy projection) live in
``infra/errors.py`` and derive from the same root.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import ClassVar

from attrs import frozen


@frozen
class Code:
    """A stable, machine-readable name for one answer, and what it tells the caller."""

    name: str  # snake_case; never renamed once published
    meaning: str


class AuthledgerError(Exception):
    """Something went wrong in authledger."""

    http_status = 500
    exit_code = 1
    problem_type = "about:blank"
    # What a problem body's ``code`` says; an error only the command line meets keeps this one, which is what
    # it would be to an HTTP caller.
    problem_code = "internal_error"
    # Reason (the domain's word) -> code, for an error that stands for several answers; ``default_reason`` is
    # the one given when none is named.
    reasons: ClassVar[Mapping[str, Code]] = {}
    default_reason: ClassVar[str | None] = None

    def __init__(self, message: str | None = None, *, reason: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())
        reason = reason or self.default_reason
        if reason is not None and reason not in self.reasons:
            raise ValueError(f"{type(self).__name__} has no code for the reason {reason!r}")
        self.reason = reason

    @property
    def message(self) -> str:
        return str(self.args[0])

    @property
    def code(self) -> str:
        """The stable code of this answer: its reason's, or its class's."""
        return self.reasons[self.reason].name if self.reason is not None else self.problem_code

    @classmethod
    def codes(cls) -> tuple[Code, ...]:
        """Every code this error can answer with, each once, in the order its reasons are declared."""
        if cls.reasons:
            return tuple(dict.fromkeys(cls.reasons.values()))
        return (Code(cls.problem_code, (cls.__doc__ or "").strip().splitlines()[0]),)


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
    problem_code = "concurrency_conflict"


class UnknownEventType(AuthledgerError):
    """The log holds an event type this version of authledger does not know."""

    exit_code = 65  # EX_DATAERR
    problem_type = "unknown-event-type"


class InvalidInput(AuthledgerError):
    """The input is malformed."""

    http_status = 400
    exit_code = 2
    problem_type = "invalid-input"
    problem_code = "invalid_input"


class PurposeUnknown(InvalidInput):
    """The purpose is not one the tenant declared."""

    problem_type = "purpose-unknown"
    problem_code = "purpose_unknown"


class AddressInvalid(InvalidInput):
    """The email address is not valid."""

    problem_type = "invalid-email"
    problem_code = "address_invalid"


class TenantUnknown(InvalidInput):
    """No tenant has this name."""

    # Only the command line names a tenant: an API key's tenant always exists.
    problem_type = "tenant-unknown"
    problem_code = "tenant_unknown"


class NotFound(AuthledgerError):
    """No such thing."""

    http_status = 404
    exit_code = 3
    problem_type = "not-found"
    problem_code = "not_found"


class Forbidden(AuthledgerError):
    """The API key is valid but lacks the scope this operation needs."""

    # Here, not in infra/errors.py: which scopes a key may grant is a domain
    # rule (domain.clients.check_grant).
    http_status = 403
    exit_code = 7  # like Unauthorized: the caller's credentials do not allow it
    problem_type = "forbidden"
    problem_code = "forbidden"


# A link or code that no longer exists is answered as one that never did: erasure leaves nothing to tell, and an
# id of another tenant must be indistinguishable from one nobody issued.
LINK_UNKNOWN = Code("token_unknown", "No such link: never issued, issued to another tenant, or its user was erased.")
CHALLENGE_UNKNOWN = Code("challenge_unknown", "No such challenge for this user (and purpose): never issued, "
                                              "issued to another tenant or user, or its user was erased.")


class TokenInvalid(AuthledgerError):
    """The token is unknown, expired, superseded, invalidated or already used."""

    http_status = 400
    exit_code = 4
    problem_type = "token-invalid"
    # The holder of a link may learn what became of it (it holds the secret); only "unknown" says nothing.
    reasons = {
        "unknown": LINK_UNKNOWN,
        "erased": LINK_UNKNOWN,
        "expired": Code("token_expired", "The link has expired; ask for a new one."),
        "used": Code("token_used", "The link was already used."),
        "superseded": Code("token_superseded", "A newer link was sent, or the password was changed since."),
        "invalidated": Code("token_invalidated", "Support invalidated the user's open links and codes."),
    }
    default_reason = "unknown"


class CodeRejected(AuthledgerError):
    """The code is wrong, expired, superseded or already used."""

    http_status = 400
    exit_code = 4
    problem_type = "code-rejected"
    reasons = {
        "unknown": CHALLENGE_UNKNOWN,
        "erased": CHALLENGE_UNKNOWN,
        "wrong": Code("code_wrong", "The code is wrong; `attempts_left` says how many tries remain."),
        "expired": Code("challenge_expired", "The challenge has expired; ask for a new code."),
        "used": Code("challenge_used", "The challenge's code was already accepted."),
        "superseded": Code("challenge_superseded", "A newer code was sent for this user and purpose."),
        "locked": Code("challenge_locked", "Too many wrong codes for this challenge; ask for a new one."),
        "invalidated": Code("challenge_invalidated", "Support invalidated the user's open links and codes."),
    }
    default_reason = "unknown"

    def __init__(self, message: str | None = None, *, attempts_left: int = 0, reason: str | None = None) -> None:
        super().__init__(message, reason=reason)
        self.attempts_left = attempts_left


class IdempotencyMismatch(AuthledgerError):
    """This idempotency key was already used with different parameters."""

    http_status = 422
    exit_code = 5
    problem_type = "idempotency-key-mismatch"
    problem_code = "idempotency_key_mismatch"


class LockedOut(AuthledgerError):
    """Too many failed attempts; this flow is locked."""

    http_status = 429
    exit_code = 6
    problem_type = "locked-out"
    problem_code = "account_locked"

    def __init__(self, message: str | None = None, *, retry_at: datetime | None = None) -> None:
        super().__init__(message)
        self.retry_at = retry_at


class RecipientSuppressed(AuthledgerError):
    """The address is on the tenant's suppression list (a permanent bounce or a complaint); nothing was sent."""

    # An admin of the tenant lifts a suppression with a reason (docs/feedback.md).

    # 422, as a create's other refusal of what it was asked (not 409: a create's 409 is "in flight, retry
    # after", and this one does not pass with time, only when an admin lifts it).
    http_status = 422
    exit_code = 14
    problem_type = "address-suppressed"
    problem_code = "address_suppressed"
