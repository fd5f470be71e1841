"""The timeline of a user, a request or a message: the log's own events, for support staff.

Events are returned as stored (payload and metadata straight from the log),
so the answer is what an auditor would read in the database. The streams to
read are found through the inline projections: ``email_outbox`` names the
user and flow of a request or message, and a user's request streams name
their messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from attrs import frozen
from sqlalchemy import text

from domain.errors import NotFound
from domain.otp import otp_stream
from domain.privacy import subject_stream
from domain.reset import reset_stream
from infra.db.engine import database_errors
from infra.eventlog.queries import messages_named_by, newest_events_of_request, newest_events_of_streams
from infra.services.unit_of_work import ServiceContext

DEFAULT_LIMIT = 500

FIND_BY_REQUEST = text("""
    SELECT user_id, flow, request_id, array_agg(message_id::text) AS messages
      FROM email_outbox WHERE request_id = :id GROUP BY user_id, flow, request_id
""")
FIND_BY_MESSAGE = text("SELECT user_id, flow, request_id FROM email_outbox WHERE message_id = :id")
@frozen
class Timeline:
    user_id: str
    request_id: UUID | None
    message_id: UUID | None
    events: list[dict[str, Any]]
    truncated: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "user_id": self.user_id,
            "request_id": str(self.request_id) if self.request_id else None,
            "message_id": str(self.message_id) if self.message_id else None,
            "events": self.events,
            "truncated": self.truncated,
        }


def _flow_stream(flow: str, user_id: str) -> str:
    return otp_stream(user_id) if flow == "otp" else reset_stream(user_id)


def _events(rows: Sequence[Any], limit: int) -> tuple[list[dict], bool]:
    """The events of rows read newest first with one more than ``limit``, oldest first; and whether more were."""
    truncated = len(rows) > limit
    return [
        {
            "position": row.global_position, "stream": row.stream_id, "version": row.stream_version,
            "type": row.event_type, "schema_version": row.schema_version,
            "recorded_at": row.recorded_at.isoformat(), "payload": row.payload, "metadata": row.metadata,
        }
        for row in reversed(rows[:limit])
    ], truncated


def user_timeline(ctx: ServiceContext, user_id: str, *, limit: int = DEFAULT_LIMIT) -> Timeline:
    """Every request, challenge and email of one user, and their erasure (the most recent ``limit`` events)."""
    streams = [reset_stream(user_id), otp_stream(user_id)]
    with database_errors(), ctx.engine.connect() as connection:
        messages = messages_named_by(connection, streams)
        streams += [f"email:{message}" for message in messages] + [subject_stream(user_id)]
        events, truncated = _events(newest_events_of_streams(connection, streams, limit + 1), limit)
    return Timeline(user_id, None, None, events, truncated)


def request_timeline(ctx: ServiceContext, request_id: UUID, *, limit: int = DEFAULT_LIMIT) -> Timeline:
    """One reset request or OTP challenge: its events and those of every email it queued."""
    with database_errors(), ctx.engine.connect() as connection:
        found = connection.execute(FIND_BY_REQUEST, {"id": request_id}).first()
        if found is None:
            raise NotFound(f"no reset request or OTP challenge {request_id}")
        params = {
            "user_stream": _flow_stream(found.flow, found.user_id), "request_id": str(request_id),
            "email_streams": [f"email:{message}" for message in found.messages],
        }
        events, truncated = _events(newest_events_of_request(connection, **params, limit=limit + 1), limit)
    return Timeline(found.user_id, request_id, None, events, truncated)


def message_timeline(ctx: ServiceContext, message_id: UUID, *, limit: int = DEFAULT_LIMIT) -> Timeline:
    """One email: its delivery events and the events of the request it serves (why it was or was not sent)."""
    with database_errors(), ctx.engine.connect() as connection:
        found = connection.execute(FIND_BY_MESSAGE, {"id": message_id}).first()
        if found is None:
            raise NotFound(f"no email {message_id}")
        params = {
            "user_stream": _flow_stream(found.flow, found.user_id), "request_id": str(found.request_id),
            "email_streams": [f"email:{message_id}"],
        }
        events, truncated = _events(newest_events_of_request(connection, **params, limit=limit + 1), limit)
    return Timeline(found.user_id, found.request_id, message_id, events, truncated)
