"""The ``reset_tokens`` read model: which token hash belongs to which request, and its state.

It lets a token presented by a user be found without knowing the user; the
decision to accept it is still made on the user's stream.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from attrs import evolve, frozen

from domain.reset_events import ResetCompleted, ResetInvalidated, ResetRequested, ResetSuperseded


@frozen
class ResetTokenRow:
    request_id: UUID
    token_hash: str
    user_id: str
    key_id: str
    message_id: UUID
    expires_at: datetime
    # "open", "superseded" or "completed". A request support withdrew (ResetInvalidated) reads "superseded" here:
    # closed unused, which is all this table tells; why is the stream's to say.
    status: str


def reset_token_key(event: object) -> UUID | None:
    """Which row an event touches, if any."""
    if isinstance(event, ResetRequested | ResetSuperseded | ResetInvalidated | ResetCompleted):
        return event.request_id
    return None


def evolve_reset_token(row: ResetTokenRow | None, event: object) -> ResetTokenRow | None:
    match event:
        case ResetRequested():
            return ResetTokenRow(
                request_id=event.request_id, token_hash=event.token_hash, user_id=event.user_id,
                key_id=event.key_id, message_id=event.message_id, expires_at=event.expires_at, status="open",
            )
        case ResetSuperseded() | ResetInvalidated() if row is not None:
            return evolve(row, status="superseded")
        case ResetCompleted() if row is not None:
            return evolve(row, status="completed")
    return row
