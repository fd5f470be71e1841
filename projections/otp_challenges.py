"""The ``otp_challenges`` read model: which user a challenge belongs to, and where it stands.

It lets a code presented with a challenge id be checked without knowing the
user; the decision to accept it is still made on the user's stream. Neither
the recipient nor the code is here: the code is never stored anywhere, and
the address is personal data that stays in the (encrypted) events.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from attrs import evolve, frozen

from domain.otp_events import (
    OtpChallengeInvalidated,
    OtpChallengeIssued,
    OtpChallengeLockedOut,
    OtpChallengeSuperseded,
    OtpChallengeVerified,
    OtpVerificationFailed,
)


@frozen
class OtpChallengeRow:
    challenge_id: UUID
    user_id: str
    # "open", "superseded", "verified" or "locked". A challenge support withdrew (OtpChallengeInvalidated) reads
    # "superseded" here: closed unused, which is all this table tells; why is the stream's to say.
    status: str
    expires_at: datetime
    failures: int  # wrong codes entered for this challenge
    message_id: UUID
    key_id: str
    purpose: str


def otp_challenge_key(event: object) -> UUID | None:
    """Which row an event touches, if any. An account lockout names the
    challenge that tripped it but changes nothing about that challenge."""
    if isinstance(event, OtpChallengeLockedOut):
        return event.challenge_id if event.scope == "challenge" else None
    if isinstance(event, OtpChallengeIssued | OtpChallengeSuperseded | OtpChallengeInvalidated
                  | OtpChallengeVerified | OtpVerificationFailed):
        return event.challenge_id
    return None


def _settled(row: OtpChallengeRow | None, status: str) -> OtpChallengeRow | None:
    # Like the domain: only an open challenge changes status; the first word is final.
    if row is None or row.status != "open":
        return row
    return evolve(row, status=status)


def evolve_otp_challenge(row: OtpChallengeRow | None, event: object) -> OtpChallengeRow | None:
    match event:
        case OtpChallengeIssued():
            return OtpChallengeRow(
                challenge_id=event.challenge_id, user_id=event.user_id, status="open",
                expires_at=event.expires_at, failures=0, message_id=event.message_id,
                key_id=event.key_id, purpose=event.purpose,
            )
        case OtpVerificationFailed() if row is not None:
            return evolve(row, failures=event.attempt)
        case OtpChallengeSuperseded() | OtpChallengeInvalidated():
            return _settled(row, "superseded")
        case OtpChallengeVerified():
            return _settled(row, "verified")
        case OtpChallengeLockedOut(scope="challenge"):
            return _settled(row, "locked")
    return row
