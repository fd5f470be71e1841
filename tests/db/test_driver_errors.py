"""Driver errors become authledger errors once, where the engine is made: no call site wraps its own."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import IntegrityError, OperationalError

from infra.errors import DatabaseUnavailable, SchemaMismatch
from infra.db.engine import Database


def test_a_server_that_is_not_there_is_database_unavailable_with_the_password_masked() -> None:
    engine = Database("postgresql+psycopg://ada:secret@127.0.0.1:1/nowhere").engine()
    try:
        with pytest.raises(DatabaseUnavailable) as raised, engine.connect():
            pass
        assert "secret" not in str(raised.value)
    finally:
        engine.dispose()


def test_a_missing_table_is_a_schema_mismatch_that_says_to_run_db_init(database: Database) -> None:
    engine = database.engine(as_app=False)
    try:
        with pytest.raises(SchemaMismatch, match="authledger db init"), engine.connect() as connection:
            connection.execute(text("SELECT * FROM no_such_table"))
    finally:
        engine.dispose()


def test_a_lock_timeout_reaches_the_caller_untranslated_for_it_to_handle(database: Database) -> None:
    engine = database.engine(as_app=False)
    try:
        with engine.connect() as holder, engine.connect() as waiter:
            holder.execute(text("LOCK TABLE email_outbox IN ACCESS EXCLUSIVE MODE"))
            waiter.execute(text("SET lock_timeout = '50ms'"))
            with pytest.raises(OperationalError) as raised:
                waiter.execute(text("LOCK TABLE email_outbox IN ACCESS EXCLUSIVE MODE"))
            assert raised.value.orig.sqlstate == "55P03"  # lock_not_available: rebuild retries on it
    finally:
        engine.dispose()


def test_constraint_violations_stay_for_the_event_store_to_translate(engine: Engine) -> None:
    with pytest.raises(IntegrityError), engine.begin() as connection:
        for _ in range(2):
            connection.execute(text(
                "INSERT INTO events"
                " (stream_id, stream_version, event_id, event_type, schema_version, payload, metadata)"
                " VALUES ('s', 1, gen_random_uuid(), 'T', 1, '{}', '{}')"
            ))
