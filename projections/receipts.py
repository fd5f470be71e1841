"""The ``receipts`` read model: what an idempotency key named, per client, flow and user.

The decision on a replayed key is still made on the user's stream (the
domain folds the same receipts from it), so two concurrent retries cannot
both win; this table only makes "what did key K create?" a primary-key
lookup for the HTTP layer, the CLI and incident review.

Rows come from requests that carried a key (``ResetRequested``,
``OtpChallengeIssued``) and from keys answered with an existing request
(``IdempotencyKeyBound``). A key past its receipt lifetime (24 h by
default) that makes a new request overwrites its row, as on the stream.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from uuid import UUID

from attrs import frozen

from domain.request_rules import IdempotencyKeyBound
from domain.otp_events import OtpChallengeIssued
from domain.reset_events import ResetRequested


def receipt_id(flow: str, client: str | None, user_id: str, idempotency_key: str) -> UUID:
    """The row id of a key's receipt: a digest of the whole scope.

    One UUID column is a primary key PostgreSQL 14 can index even when the
    client is NULL (a composite key could not hold a NULL), and it is the
    same value whoever computes it.
    """
    scope = json.dumps([flow, client, user_id, idempotency_key], separators=(",", ":"))
    return UUID(bytes=hashlib.sha256(scope.encode("utf-8")).digest()[:16])


@frozen
class ReceiptRow:
    receipt_id: UUID
    flow: str  # "reset" or "otp"
    client: str | None
    user_id: str
    idempotency_key: str
    request_id: UUID  # the reset request or OTP challenge the key names
    message_id: UUID
    created_at: datetime  # when the key was first answered


def _row(flow: str, client: str | None, user_id: str, key: str, request_id: UUID,
         message_id: UUID, created_at: datetime) -> ReceiptRow:  # fmt: skip
    return ReceiptRow(
        receipt_id(flow, client, user_id, key), flow, client, user_id, key, request_id, message_id, created_at
    )


def _receipt_of(event: object) -> ReceiptRow | None:
    match event:
        case ResetRequested(idempotency_key=str(key)):
            return _row("reset", event.client, event.user_id, key, event.request_id, event.message_id,
                        event.requested_at)  # fmt: skip
        case OtpChallengeIssued(idempotency_key=str(key)):
            return _row("otp", event.client, event.user_id, key, event.challenge_id, event.message_id,
                        event.issued_at)  # fmt: skip
        case IdempotencyKeyBound():
            return _row(event.flow, event.client, event.user_id, event.idempotency_key, event.request_id,
                        event.message_id, event.bound_at)  # fmt: skip
    return None


def receipt_key(event: object) -> UUID | None:
    """Which row an event touches, if any."""
    receipt = _receipt_of(event)
    return receipt.receipt_id if receipt is not None else None


def evolve_receipt(row: ReceiptRow | None, event: object) -> ReceiptRow | None:
    """The newest answer for a key wins, as on the stream."""
    return _receipt_of(event) or row
