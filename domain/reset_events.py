"""The events of a user's ``reset-user:<user_id>`` stream, and the names of the emails they queue."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from attrs import field, frozen


RESET_LINK = "reset_link"
PASSWORD_CHANGED = "password_changed"


def reset_stream(user_id: str) -> str:
    """The stream id holding this user's reset requests."""
    return f"reset-user:{user_id}"


@frozen
class ResetRequested:
    request_id: UUID
    user_id: str
    recipient: str
    key_id: str  # the key that derives the token; the token itself is never stored
    token_hash: str
    requested_at: datetime
    expires_at: datetime
    message_id: UUID
    idempotency_key: str | None
    client: str | None
    # "<key id>:<hex HMAC>" of the normalised recipient, so a reviewer can find
    # the user by address (infra/services/address_index.py); a personal field,
    # erased with the recipient. None on events from before it existed.
    address_hmac: str | None = None
    # How the token is derived (domain.tokens): 1 from key and request id alone,
    # 2 also from ``nonce``, a secret sealed under the user's data key (a personal field).
    derivation: int = 1
    nonce: str | None = field(default=None, repr=False)
    # The language the end user asked for (BCP 47), not personal data; None on events from before it
    # existed and when not given: the email is then in the tenant's default language.
    locale: str | None = None


@frozen
class ResetSuperseded:
    request_id: UUID
    superseded_by: UUID | None
    reason: str  # "new_request" or "password_changed"


@frozen
class ResetInvalidated:
    """Support withdrew an open request: its link no longer works and its email, if still queued, is not sent.

    ``reason``: why, as support said it (one line, no address); who acted is in the event's metadata.
    """

    request_id: UUID
    reason: str
    invalidated_at: datetime


@frozen
class ResetRequestRefused:
    user_id: str
    reason: str  # "rate_limited"
    refused_at: datetime
    retry_at: datetime


@frozen
class ResetCompleted:
    request_id: UUID
    user_id: str
    completed_at: datetime
    notice_message_id: UUID


@frozen
class ResetTokenRejected:
    """A known reset link was presented when it could no longer be used; it was refused.

    ``reason``: "used", "superseded", "invalidated", "expired" or "erased". Bounded per window
    (``domain.counting.count_rejections``); the caller is in the event's metadata.
    """

    request_id: UUID
    reason: str
    rejected_at: datetime
