"""The same contract, run against the in-memory store and the PostgreSQL store."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import pytest
from sqlalchemy import Engine

from domain.email import DeliverySkipped, EmailQueued
from domain.errors import ConcurrencyConflict, UnknownEventType
from domain.log import Checkpoint, RecordedEvent
from infra.eventlog.memory import InMemoryEventStore
from infra.eventlog.postgres import PostgresEventStore
from infra.eventlog.reader import HORIZON, read_page


class CommittingPostgresStore:
    """Each call in its own committed transaction, as a service would use it.

    The whole log is read through ``infra.eventlog.reader``, the one whole-log
    reader on PostgreSQL; the in-memory store reads its list.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def read_all(self, after: Checkpoint = Checkpoint(), limit: int = 1000) -> list[RecordedEvent]:
        with self.engine.connect() as connection:
            return read_page(connection, after, HORIZON, limit)

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            with self.engine.begin() as connection:
                return getattr(PostgresEventStore(connection), name)(*args, **kwargs)

        return call


@pytest.fixture(params=["memory", "postgres"])
def store(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "memory":
        yield InMemoryEventStore()
    else:
        yield CommittingPostgresStore(request.getfixturevalue("engine"))


def queued(n: int = 0) -> EmailQueued:
    return EmailQueued(
        message_id=uuid4(), flow="reset", template="reset_link", user_id=f"user-{n}",
        request_id=uuid4(), recipient=f"u{n}@example.test", available_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


def test_a_new_stream_starts_at_version_one_and_loads_in_order(store: Any) -> None:
    first = queued(1)
    second = DeliverySkipped(message_id=uuid4(), skipped_at=datetime(2026, 1, 1, tzinfo=UTC), reason="superseded")
    recorded = store.append("email:a", 0, [first, second], {"actor": "test"})
    assert [r.stream_version for r in recorded] == [1, 2]
    loaded = store.load("email:a")
    assert [r.event for r in loaded] == [first, second]
    assert [r.stream_version for r in loaded] == [1, 2]
    assert loaded[0].metadata == {"actor": "test"}
    assert loaded[0].event_type == "EmailQueued"


def test_appending_after_a_stale_version_conflicts_and_writes_nothing(store: Any) -> None:
    store.append("email:a", 0, [queued(1)])
    with pytest.raises(ConcurrencyConflict):
        store.append("email:a", 0, [queued(2)])
    assert len(store.load("email:a")) == 1


def test_appending_after_a_version_the_stream_never_reached_conflicts(store: Any) -> None:
    store.append("email:a", 0, [queued(1)])
    with pytest.raises(ConcurrencyConflict):
        store.append("email:a", 5, [queued(2)])
    assert store.stream_version("email:a") == 1


def test_appending_nothing_changes_nothing(store: Any) -> None:
    assert store.append("email:a", 0, []) == []
    assert store.load("email:a") == []


def test_an_unregistered_event_class_is_refused(store: Any) -> None:
    with pytest.raises(UnknownEventType):
        store.append("email:a", 0, [object()])
    assert store.load("email:a") == []


def test_reading_the_whole_log_pages_through_every_stream_in_order(store: Any) -> None:
    for n in range(5):
        store.append(f"email:{n}", 0, [queued(n)])
    seen, checkpoint = [], Checkpoint()
    while page := store.read_all(after=checkpoint, limit=2):
        seen += page
        checkpoint = page[-1].checkpoint
    assert [r.stream_id for r in seen] == [f"email:{n}" for n in range(5)]
    assert [r.checkpoint for r in seen] == sorted(r.checkpoint for r in seen)


def test_an_append_to_several_streams_is_all_or_nothing(store: Any) -> None:
    store.append("email:a", 0, [queued(1)])
    with pytest.raises(ConcurrencyConflict):
        store.append_many([("email:b", 0, [queued(2)]), ("email:a", 0, [queued(3)])])
    assert store.load("email:b") == []
    assert len(store.load("email:a")) == 1
