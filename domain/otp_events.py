"""The events of a user's ``otp-user:<user_id>`` stream, and the name of the email they queue."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from attrs import field, frozen


OTP_CODE = "otp_code"


def otp_stream(user_id: str) -> str:
    """The stream id holding this user's OTP challenges."""
    return f"otp-user:{user_id}"


@frozen
class OtpChallengeIssued:
    challenge_id: UUID
    user_id: str
    recipient: str
    key_id: str  # the key that derives the code; the code itself is never stored
    # The code's length, fixed at issue: changing the policy must not change
    # the code of a challenge already sent.
    digits: int
    purpose: str
    issued_at: datetime
    expires_at: datetime
    message_id: UUID
    idempotency_key: str | None
    client: str | None
    # "<key id>:<hex HMAC>" of the normalised recipient (infra/services/address_index.py);
    # a personal field, erased with the recipient. None on events from before it existed.
    address_hmac: str | None = None
    # How the code is derived (domain.tokens): 1 from key and challenge id alone,
    # 2 also from ``nonce``, a secret sealed under the user's data key (a personal field).
    derivation: int = 1
    nonce: str | None = field(default=None, repr=False)
    # The language the end user asked for (BCP 47), not personal data; None on events from before it
    # existed and when not given: the email is then in the tenant's default language.
    locale: str | None = None


@frozen
class OtpChallengeSuperseded:
    challenge_id: UUID
    superseded_by: UUID


@frozen
class OtpChallengeInvalidated:
    """Support withdrew an open challenge: its code is no longer accepted and its email, if still queued, is not sent.

    ``reason``: why, as support said it (one line, no address); who acted is in the event's metadata.
    """

    challenge_id: UUID
    reason: str
    invalidated_at: datetime


@frozen
class OtpVerificationFailed:
    challenge_id: UUID
    attempt: int  # failures on this challenge so far, this one included
    consecutive_failures: int  # across challenges since the last success
    failed_at: datetime


@frozen
class OtpChallengeVerified:
    challenge_id: UUID
    verified_at: datetime


@frozen
class OtpChallengeLockedOut:
    challenge_id: UUID | None
    scope: str  # "challenge" or "account"
    locked_at: datetime
    until: datetime | None  # None: for good (a locked challenge never reopens)


@frozen
class OtpRequestRefused:
    user_id: str
    reason: str  # "rate_limited"
    refused_at: datetime
    retry_at: datetime


@frozen
class OtpCodeRejected:
    """A code was presented for a known challenge that could no longer be used; it was refused unchecked.

    ``reason``: "used", "superseded", "invalidated", "expired", "locked" or "erased". Bounded per
    window (``domain.counting.count_rejections``); the caller is in the event's metadata.
    """

    challenge_id: UUID
    reason: str
    rejected_at: datetime
