"""Reading the log back in tests: the events of a stream, by type name."""

from __future__ import annotations

from uuid import UUID

from sqlalchemy import Engine

from domain.email import email_stream
from infra.eventlog.postgres import PostgresEventStore


def stream_events(engine: Engine, stream_id: str) -> list[object]:
    with engine.connect() as connection:
        return [r.event for r in PostgresEventStore(connection).load(stream_id)]


def email_event_types(engine: Engine, message_id: UUID) -> list[str]:
    return [type(e).__name__ for e in stream_events(engine, email_stream(message_id))]
