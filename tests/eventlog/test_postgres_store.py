"""The PostgreSQL event store under real concurrency, and its append-only guards."""

from __future__ import annotations

import random
import threading
import time
from datetime import UTC, datetime
from uuid import uuid4

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from domain.email import EmailQueued
from domain.errors import ConcurrencyConflict, UnknownEventType
from domain.log import Checkpoint, RecordedEvent
from infra.eventlog.postgres import PostgresEventStore
from infra.eventlog.reader import HORIZON, read_page


def queued(n: int) -> EmailQueued:
    return EmailQueued(
        message_id=uuid4(), flow="otp", template="otp_code", user_id=str(n),
        request_id=uuid4(), recipient="someone@example.test", available_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


def test_eight_writers_on_one_stream_win_each_version_exactly_once(engine: Engine) -> None:
    wins: list[int] = []
    conflicts = 0
    lock = threading.Lock()
    start = threading.Barrier(8)

    def writer(n: int) -> None:
        nonlocal conflicts
        start.wait()
        for _ in range(25):
            try:
                with engine.begin() as connection:
                    store = PostgresEventStore(connection)
                    version = store.stream_version("otp-user:shared")
                    store.append("otp-user:shared", version, [queued(n)])
            except ConcurrencyConflict:
                with lock:
                    conflicts += 1
                continue
            with lock:
                wins.append(version + 1)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    with engine.connect() as connection:
        versions = [r.stream_version for r in PostgresEventStore(connection).load("otp-user:shared")]
    assert sorted(wins) == versions == list(range(1, len(versions) + 1))
    assert len(wins) + conflicts == 8 * 25
    assert conflicts > 0, "the writers never actually raced"


@pytest.mark.slow
def test_a_whole_log_reader_never_skips_a_late_commit(engine: Engine) -> None:
    """Writers hold transactions open for random times, some for a second, while a reader follows."""
    committed: list[int] = []
    lock = threading.Lock()
    writers_done = threading.Event()
    rng = random.Random(7)
    delays = [[rng.choice([0, 0, 0.01, 0.05, 0.2, 1.0]) for _ in range(12)] for _ in range(5)]

    def writer(n: int) -> None:
        for i, delay in enumerate(delays[n]):
            with engine.begin() as connection:
                recorded = PostgresEventStore(connection).append(f"email:w{n}-{i}", 0, [queued(n)])
                time.sleep(delay)  # the row is inserted, its position taken, the commit late
            with lock:
                committed.append(recorded[0].global_position)

    seen: list[RecordedEvent] = []
    checkpoints: list[Checkpoint] = []

    def reader() -> None:
        checkpoint = Checkpoint()
        while True:
            finished = writers_done.is_set()
            with engine.connect() as connection:
                page = read_page(connection, checkpoint, HORIZON, 7)
            if page:
                seen.extend(page)
                checkpoint = page[-1].checkpoint
                checkpoints.append(checkpoint)
            elif finished:
                return
            else:
                time.sleep(0.005)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(5)]
    follower = threading.Thread(target=reader)
    follower.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    writers_done.set()
    follower.join(timeout=30)

    positions = [event.global_position for event in seen]
    assert sorted(positions) == sorted(committed), "every committed event, exactly once"
    assert len(set(positions)) == len(positions)
    assert checkpoints == sorted(checkpoints), "the checkpoint only moves forward"
    with engine.connect() as connection:
        everything = read_page(connection, Checkpoint(), HORIZON, 10_000)
    assert [e.global_position for e in everything] == positions, "a stable order, the same on every read"


def test_a_reader_does_not_see_events_of_a_transaction_still_open(engine: Engine) -> None:
    with engine.connect() as writer_connection:
        writer_connection.begin()
        PostgresEventStore(writer_connection).append("email:open", 0, [queued(1)])
        with engine.connect() as connection:
            assert read_page(connection, Checkpoint()) == []
        writer_connection.commit()
    with engine.connect() as connection:
        assert len(read_page(connection, Checkpoint())) == 1


def _seed(engine: Engine) -> None:
    with engine.begin() as connection:
        PostgresEventStore(connection).append("email:x", 0, [queued(1)])


@pytest.mark.parametrize(
    "statement",
    ["UPDATE events SET event_type = 'Forged'", "DELETE FROM events", "TRUNCATE events"],
)
def test_the_log_cannot_be_changed_even_by_its_owner(admin_engine: Engine, statement: str) -> None:
    _seed(admin_engine)
    with pytest.raises(DBAPIError, match="append-only"):
        with admin_engine.begin() as connection:
            connection.execute(text(statement))


@pytest.mark.parametrize(
    "statement",
    ["UPDATE events SET event_type = 'Forged'", "DELETE FROM events", "TRUNCATE events"],
)
def test_the_application_role_may_not_change_the_log(engine: Engine, statement: str) -> None:
    _seed(engine)
    with pytest.raises(DBAPIError, match="permission denied"):
        with engine.begin() as connection:
            connection.execute(text(statement))
    with engine.connect() as connection:
        assert len(PostgresEventStore(connection).load("email:x")) == 1


def test_an_unknown_event_type_in_the_log_is_reported_clearly(admin_engine: Engine) -> None:
    with admin_engine.begin() as connection:
        connection.execute(text("""
            INSERT INTO events (stream_id, stream_version, event_id, event_type, schema_version, payload)
            VALUES ('email:future', 1, gen_random_uuid(), 'FromTheFuture', 1, '{}')
        """))
    with admin_engine.connect() as connection, pytest.raises(UnknownEventType, match="FromTheFuture"):
        PostgresEventStore(connection).load("email:future")
