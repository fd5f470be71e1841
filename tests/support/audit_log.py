"""Audit tests: a small log to seal, and a superuser who rewrites history."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from uuid import uuid4

from sqlalchemy import Connection, Engine, text

from domain.email import EmailQueued, LeaseExpired, email_stream
from infra.eventlog.postgres import PostgresEventStore

NOW = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def queue_one(engine: Engine, n: int) -> str:
    """One email queued and twice leased in vain, appended in three transactions as workers would."""
    message_id = uuid4()
    stream = email_stream(message_id)
    steps = [
        EmailQueued(message_id=message_id, flow="reset", template="reset_link", user_id=f"user-{n}",
                    request_id=uuid4(), recipient=f"user{n}@example.com", available_at=NOW),
        LeaseExpired(message_id=message_id, lease_owner="worker-1", lease_token=uuid4(),
                     expired_at=NOW + timedelta(seconds=45)),
        LeaseExpired(message_id=message_id, lease_owner="worker-2", lease_token=uuid4(),
                     expired_at=NOW + timedelta(seconds=90)),
    ]
    for version, event in enumerate(steps):
        with engine.begin() as connection:
            PostgresEventStore(connection).append(stream, version, [event], {"actor": "test", "n": n})
    return stream


def seed(engine: Engine, messages: int = 4) -> list[str]:
    """``messages`` email streams of three events each, every event its own transaction."""
    return [queue_one(engine, n) for n in range(messages)]


def position_of(engine: Engine, stream: str, version: int) -> int:
    with engine.connect() as connection:
        return connection.execute(
            text("SELECT global_position FROM events WHERE stream_id = :s AND stream_version = :v"),
            {"s": stream, "v": version},
        ).scalar_one()


@contextlib.contextmanager
def tampering(admin_engine: Engine, table: str = "events") -> Iterator[Connection]:
    """What a superuser can do: switch the append-only guards off, change history, switch them back on."""
    with admin_engine.begin() as connection:
        connection.execute(text(f"ALTER TABLE {table} DISABLE TRIGGER USER"))
        yield connection
        connection.execute(text(f"ALTER TABLE {table} ENABLE TRIGGER USER"))
