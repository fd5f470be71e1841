"""Pipelined transactions: fewer waits, the same transaction, and a clean connection after a failure."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import DataError, IntegrityError

from infra.db.engine import Database
from infra.errors import DatabaseUnavailable, SchemaMismatch
from infra.db.pipeline import execute_deferred, execute_read, pipelined_transaction
from tests.support.wire import at_the_wire

INSERT = text("INSERT INTO notes (id, body) VALUES (:id, :body)")
COUNT = text("SELECT count(*) FROM notes")
NOTES = text("SELECT id, body FROM notes ORDER BY id")
MISSING = text("SELECT id FROM no_such_table")


@pytest.fixture
def one_connection(database: Database) -> Iterator[Engine]:
    """A pool of one, so that the connection a failure leaves behind is the next one used; as made for
    the service (its driver errors translated), but as the login role, which may create a table."""
    engine = database.engine(pool_size=1, as_app=False)
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE notes (id int PRIMARY KEY, body text)"))
    yield engine
    engine.dispose()


def notes(engine: Engine) -> list[int]:
    with engine.connect() as connection:
        return list(connection.execute(text("SELECT id FROM notes ORDER BY id")).scalars())


def test_deferred_writes_commit_with_the_transaction_and_wait_only_where_read(one_connection: Engine) -> None:
    with at_the_wire(one_connection) as wire, pipelined_transaction(one_connection) as connection:
        execute_deferred(connection, INSERT, {"id": 1, "body": "a"})
        execute_deferred(connection, INSERT, {"id": 2, "body": "b"})
        seen = connection.execute(COUNT).scalar_one()  # the server ran the writes first, in order
        execute_deferred(connection, INSERT, {"id": 3, "body": "c"})
    assert seen == 2
    assert wire.round_trips == 2  # BEGIN and two writes with the count; the last write with the COMMIT
    assert notes(one_connection) == [1, 2, 3]


def test_a_deferred_write_that_fails_rolls_everything_back_and_leaves_a_clean_connection(
    one_connection: Engine,
) -> None:
    with pytest.raises(IntegrityError), pipelined_transaction(one_connection) as connection:
        execute_deferred(connection, INSERT, {"id": 1, "body": "a"})
        execute_deferred(connection, INSERT, {"id": 1, "body": "twice"})  # fails at the COMMIT's sync
        execute_deferred(connection, INSERT, {"id": 2, "body": "b"})
    assert notes(one_connection) == []
    with pipelined_transaction(one_connection) as connection:  # the same pooled connection, usable
        execute_deferred(connection, INSERT, {"id": 5, "body": "e"})
    assert notes(one_connection) == [5]


def test_a_failure_raised_at_a_read_is_the_write_that_failed(one_connection: Engine) -> None:
    with pytest.raises(IntegrityError, match="duplicate key"), pipelined_transaction(one_connection) as connection:
        execute_deferred(connection, INSERT, {"id": 1, "body": "a"})
        execute_deferred(connection, INSERT, {"id": 1, "body": "twice"})
        connection.execute(COUNT).scalar_one()
    assert notes(one_connection) == []


def test_an_error_in_the_block_rolls_back_what_was_sent(one_connection: Engine) -> None:
    with pytest.raises(ValueError, match="decided against"), pipelined_transaction(one_connection) as connection:
        execute_deferred(connection, INSERT, {"id": 1, "body": "a"})
        connection.execute(COUNT).scalar_one()  # the write has run on the server
        raise ValueError("decided against it")
    assert notes(one_connection) == []
    with one_connection.connect() as connection:  # back in the pool as SQLAlchemy expects it: not autocommit
        assert connection.connection.driver_connection.autocommit is False  # type: ignore[union-attr]


def test_a_server_gone_before_the_commit_is_reported_unavailable_and_its_connection_replaced(
    one_connection: Engine, admin_engine: Engine
) -> None:
    with pytest.raises(DatabaseUnavailable), pipelined_transaction(one_connection) as connection:
        execute_deferred(connection, INSERT, {"id": 1, "body": "a"})
        pid = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with admin_engine.connect() as other:
            other.execute(text("SELECT pg_terminate_backend(:pid, 10000)"), {"pid": pid})  # waits until it is gone
        execute_deferred(connection, INSERT, {"id": 2, "body": "b"})  # sent with the COMMIT, to no one
    assert notes(one_connection) == []  # on a new connection


def test_a_read_sees_the_writes_deferred_before_it_and_its_rows_read_alike_in_and_out_of_a_pipeline(
    one_connection: Engine,
) -> None:
    with at_the_wire(one_connection) as wire, pipelined_transaction(one_connection) as connection:
        execute_deferred(connection, INSERT, {"id": 1, "body": "a"})
        inside = execute_read(connection, NOTES, {})
    with one_connection.connect() as connection:
        outside = execute_read(connection, NOTES, {})
    assert [(row.id, row.body) for row in inside] == [(row.id, row.body) for row in outside] == [(1, "a")]
    assert [row._asdict() for row in inside] == [row._asdict() for row in outside] == [{"id": 1, "body": "a"}]
    assert wire.round_trips == 2  # BEGIN and the write with the read; the COMMIT


def test_a_deferred_write_that_fails_is_raised_by_the_next_read_as_sqlalchemy_would(one_connection: Engine) -> None:
    with pytest.raises(IntegrityError, match="duplicate key"), pipelined_transaction(one_connection) as connection:
        execute_deferred(connection, INSERT, {"id": 1, "body": "a"})
        execute_deferred(connection, INSERT, {"id": 1, "body": "twice"})
        execute_read(connection, NOTES, {})
    assert notes(one_connection) == []


def test_a_read_of_a_missing_table_is_translated_as_any_statement_is(one_connection: Engine) -> None:
    with pytest.raises(SchemaMismatch, match="db init"), pipelined_transaction(one_connection) as connection:
        execute_deferred(connection, INSERT, {"id": 1, "body": "a"})
        execute_read(connection, MISSING, {})
    with pipelined_transaction(one_connection) as connection:  # the same pooled connection, usable
        assert execute_read(connection, NOTES, {}) == []


def test_a_server_gone_before_a_read_is_reported_unavailable_and_its_connection_replaced(
    one_connection: Engine, admin_engine: Engine
) -> None:
    with pytest.raises(DatabaseUnavailable), pipelined_transaction(one_connection) as connection:
        pid = execute_read(connection, text("SELECT pg_backend_pid() AS pid"), {})[0].pid
        with admin_engine.connect() as other:
            other.execute(text("SELECT pg_terminate_backend(:pid, 10000)"), {"pid": pid})
        execute_deferred(connection, INSERT, {"id": 1, "body": "a"})
        execute_read(connection, NOTES, {})
    with pipelined_transaction(one_connection) as connection:
        execute_deferred(connection, INSERT, {"id": 2, "body": "b"})
    assert notes(one_connection) == [2]


def test_a_write_failing_at_the_commit_is_raised_with_no_second_warning_from_psycopg(
    one_connection: Engine, caplog: pytest.LogCaptureFixture,
) -> None:
    # Told of the error while leaving the aborted pipeline, psycopg logs its own second one as a warning, with
    # the server's detail. The error surfaces at the COMMIT's sync, or earlier, while the COMMIT is being sent,
    # as the answers happen to arrive: tried a hundred times, so that both ways are taken.
    with caplog.at_level(logging.WARNING, logger="psycopg"):
        for _ in range(100):
            with pytest.raises(IntegrityError), pipelined_transaction(one_connection) as connection:
                execute_deferred(connection, INSERT, {"id": 1, "body": "a"})
                execute_deferred(connection, INSERT, {"id": 1, "body": "twice"})
    assert [record.getMessage() for record in caplog.records if record.name.startswith("psycopg")] == []


def test_a_read_that_fails_hides_its_parameters_when_the_engine_hides_them(database: Database) -> None:
    engine = create_engine(database.url, hide_parameters=True, pool_size=1)
    try:
        with pytest.raises(DataError) as raised, pipelined_transaction(engine) as connection:
            execute_read(connection, text("SELECT CAST(:n AS int) / 0 WHERE CAST(:tag AS text) IS NOT NULL"),
                         {"n": 7, "tag": "private"})
    finally:
        engine.dispose()
    assert "private" not in str(raised.value) and "parameters hidden" in str(raised.value)  # as SQLAlchemy's own
