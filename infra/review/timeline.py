"""The timeline of a user, a request or a message: the log's own events, for support staff.

Events are returned as stored (payload and metadata straight from the log),
so the answer is what an auditor would read in the database. The streams to
read are found through the inline projections: ``email_outbox`` names the
user and flow of a request or message, and a user's request streams name
their messages.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from attrs import frozen
from sqlalchemy import Connection, text

from domain.errors import NotFound
from domain.otp import otp_stream
from domain.privacy import subject_stream
from domain.reset import reset_stream
from infra.services.unit_of_work import ServiceContext

DEFAULT_LIMIT = 500

FIND_BY_REQUEST = text("""
    SELECT user_id, flow, request_id, array_agg(message_id::text) AS messages
      FROM email_outbox WHERE request_id = :id GROUP BY user_id, flow, request_id
""")
FIND_BY_MESSAGE = text("SELECT user_id, flow, request_id FROM email_outbox WHERE message_id = :id")
# The user's two request streams, and the messages their events name.
USER_MESSAGES = text("""
    SELECT DISTINCT m.id FROM events,
           LATERAL (VALUES (payload->>'message_id'), (payload->>'notice_message_id')) AS m(id)
     WHERE stream_id = ANY(CAST(:streams AS text[])) AND m.id IS NOT NULL
""")
# The newest events first so that LIMIT keeps the most recent; reversed in Python.
EVENTS_OF_STREAMS = text("""
    SELECT global_position, stream_id, stream_version, event_type, schema_version, recorded_at, payload, metadata
      FROM events WHERE stream_id = ANY(CAST(:streams AS text[]))
     ORDER BY global_position DESC LIMIT :limit
""")
EVENTS_OF_REQUEST = text("""
    SELECT global_position, stream_id, stream_version, event_type, schema_version, recorded_at, payload, metadata
      FROM events
     WHERE (stream_id = :user_stream
            AND (payload->>'request_id' = :id OR payload->>'challenge_id' = :id))
        OR stream_id = ANY(CAST(:email_streams AS text[]))
     ORDER BY global_position DESC LIMIT :limit
""")


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


def _events(connection: Connection, query: Any, params: dict[str, Any], limit: int) -> tuple[list[dict], bool]:
    rows = connection.execute(query, {**params, "limit": limit + 1}).all()
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
    with ctx.engine.connect() as connection:
        messages = connection.execute(USER_MESSAGES, {"streams": streams}).scalars().all()
        streams += [f"email:{message}" for message in messages] + [subject_stream(user_id)]
        events, truncated = _events(connection, EVENTS_OF_STREAMS, {"streams": streams}, limit)
    return Timeline(user_id, None, None, events, truncated)


def request_timeline(ctx: ServiceContext, request_id: UUID, *, limit: int = DEFAULT_LIMIT) -> Timeline:
    """One reset request or OTP challenge: its events and those of every email it queued."""
    with ctx.engine.connect() as connection:
        found = connection.execute(FIND_BY_REQUEST, {"id": request_id}).first()
        if found is None:
            raise NotFound(f"no reset request or OTP challenge {request_id}")
        params = {
            "user_stream": _flow_stream(found.flow, found.user_id), "id": str(request_id),
            "email_streams": [f"email:{message}" for message in found.messages],
        }
        events, truncated = _events(connection, EVENTS_OF_REQUEST, params, limit)
    return Timeline(found.user_id, request_id, None, events, truncated)


def message_timeline(ctx: ServiceContext, message_id: UUID, *, limit: int = DEFAULT_LIMIT) -> Timeline:
    """One email: its delivery events and the events of the request it serves (why it was or was not sent)."""
    with ctx.engine.connect() as connection:
        found = connection.execute(FIND_BY_MESSAGE, {"id": message_id}).first()
        if found is None:
            raise NotFound(f"no email {message_id}")
        params = {
            "user_stream": _flow_stream(found.flow, found.user_id), "id": str(found.request_id),
            "email_streams": [f"email:{message_id}"],
        }
        events, truncated = _events(connection, EVENTS_OF_REQUEST, params, limit)
    return Timeline(found.user_id, found.request_id, message_id, events, truncated)
