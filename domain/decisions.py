"""What a decision returns.

A decide function never writes anything: it returns a ``Decision`` that the
service layer appends (``events`` to the user's stream, each email to its own
``email:<message_id>`` stream) in one transaction, then answers the caller
from ``outcome``.

The rules both request flows share live beside it: ``domain.request_rules``
(idempotency receipts, reuse within the cooldown, the hourly limit),
``domain.counting`` (floods counted rather than written) and
``domain.input_checks``.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from attrs import frozen

from domain.email import EmailQueued


@frozen
class RequestOutcome:
    """A reset request or OTP challenge the caller can point the user to.

    ``reused`` is True when the call answered with a request made before it
    (a repeat within the cooldown). ``replayed`` is True only for a replay:
    the same idempotency key answered again with its first outcome, ``reused``
    and all, so that the two answers differ in nothing else.
    """

    request_id: UUID
    message_id: UUID
    expires_at: datetime
    reused: bool
    replayed: bool = False


@frozen
class Refused:
    """The request was refused and the refusal recorded; retry at ``retry_at``."""

    reason: str  # "rate_limited"
    retry_at: datetime


@frozen
class ConsumeOutcome:
    """A reset token was consumed: the caller may now change this user's password."""

    request_id: UUID
    user_id: str
    completed_at: datetime


@frozen
class VerifyOutcome:
    """The result of checking an OTP code that was written to the log."""

    verified: bool
    attempts_left: int
    locked: bool


@frozen
class Rejected:
    """A known link or code was presented when it could no longer be used; the refusal was recorded (or counted).

    ``message`` is the answer's words, those a caller got before rejections were recorded.
    """

    reason: str  # "used", "superseded", "invalidated", "expired", "locked", "erased" or "account_locked"
    message: str
    retry_at: datetime | None = None  # while the whole account is locked: when codes are accepted again


@frozen
class Counted:
    """A call answered as the stream's last ones were: to be counted, not written as an event."""

    flow: str  # "reset" or "otp"
    user_id: str
    answer: str  # "refused", "reused" or "rejected"
    at: datetime
    client: str | None


@frozen
class Decision:
    """Events for the user stream (in order), emails to queue, the answer, and any call to count instead."""

    events: tuple[object, ...]
    emails: tuple[EmailQueued, ...]
    # Or a flow's own answer (``domain.reset.LinkValid``).
    outcome: RequestOutcome | Refused | ConsumeOutcome | VerifyOutcome | Rejected | object
    counted: Counted | None = None
