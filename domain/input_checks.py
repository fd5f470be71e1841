"""Checks on what comes into the domain: text fields, operators' reasons, UTC datetimes.

Bad input is refused with ``InvalidInput`` before anything is decided; a naive
datetime is a programming error (``ValueError``).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from domain.addresses import check_address
from domain.characters import has_unsafe_characters
from domain.errors import InvalidInput


def require_utc(moment: datetime) -> None:
    """Raise ``ValueError`` unless ``moment`` is timezone-aware UTC.

    Naive datetimes compare wrongly with stored ones and shift by the server's
    zone; the domain refuses them instead of guessing.
    """
    if not isinstance(moment, datetime) or moment.utcoffset() != timedelta(0):
        raise ValueError(f"expected a timezone-aware UTC datetime, got {moment!r}")


def check_text(name: str, value: object, *, max_length: int) -> None:
    """Raise ``InvalidInput`` unless ``value`` is a short single-token string."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{name} must be a non-empty string")
    if len(value) > max_length:
        raise InvalidInput(f"{name} must be at most {max_length} characters")
    if has_unsafe_characters(value):
        raise InvalidInput(f"{name} must not contain whitespace or control characters")


MAX_REASON_LENGTH = 500
EMAIL_ADDRESS = re.compile(r"[^\s@]+@[^\s@]+\.[^\s@]+")


def operator_reason(reason: object, *, blank: str, instead: str) -> str:
    """An operator's reason for the record, trimmed; ``InvalidInput`` (``blank`` when empty) unless it is one
    line of plain text, short, and free of email addresses (``instead`` says what to write)."""
    reason = reason.strip() if isinstance(reason, str) else ""
    if not reason:
        raise InvalidInput(blank)
    if any(ord(c) < 32 or ord(c) == 127 for c in reason):
        raise InvalidInput("the reason holds control characters; give it as one line of plain text")
    if len(reason) > MAX_REASON_LENGTH:
        raise InvalidInput(f"the reason is {len(reason)} characters long; keep it to {MAX_REASON_LENGTH}")
    if EMAIL_ADDRESS.search(reason):
        # The reason stays in the log in clear: `privacy forget` could not erase an address in it.
        raise InvalidInput(f"the reason holds an email address; {instead}")
    return reason


def check_optional_text(name: str, value: object, *, max_length: int) -> None:
    """Like ``check_text``, but None is allowed."""
    if value is not None:
        check_text(name, value, max_length=max_length)


def check_request_input(
    user_id: object, recipient: object, idempotency_key: object, client: object
) -> None:
    """Raise ``InvalidInput`` unless a request command's common fields are
    well formed, so that bad input is refused before anything is decided."""
    check_text("user_id", user_id, max_length=200)
    check_address(recipient)
    check_optional_text("idempotency_key", idempotency_key, max_length=255)
    check_optional_text("client", client, max_length=200)
