"""Whole-log readers page in numeric transaction-id order, also when ids gain a digit."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

from sqlalchemy import Engine, text

from domain.email import EmailQueued
from domain.log import Checkpoint
from infra.eventlog.reader import HORIZON, read_page
from infra.eventlog.postgres import PostgresEventStore


def append_one(engine: Engine) -> int:
    message_id = uuid4()
    event = EmailQueued(message_id, "reset", "reset_link", "42", uuid4(), "ada@example.test", datetime.now(UTC))
    with engine.begin() as connection:
        [recorded] = PostgresEventStore(connection).append(f"email:{message_id}", 0, [event])
    return recorded.transaction_id


def burn_transaction_ids_past(admin_engine: Engine, boundary: int) -> None:
    """Consume transaction ids (one per subtransaction that writes) until ``boundary``."""
    with admin_engine.begin() as connection:
        current = int(connection.execute(text("SELECT pg_current_xact_id()::text")).scalar_one())
        connection.execute(text("CREATE TEMP TABLE burn (n int)"))
        connection.execute(text(
            "DO $$ BEGIN FOR i IN 1..:n LOOP BEGIN INSERT INTO burn VALUES (i); "
            "EXCEPTION WHEN others THEN NULL; END; END LOOP; END $$".replace(":n", str(boundary - current + 1))
        ))


def test_readers_page_across_a_transaction_id_that_gains_a_digit(engine: Engine, admin_engine: Engine) -> None:
    first = append_one(engine)
    burn_transaction_ids_past(admin_engine, 10 ** len(str(first)))
    second = append_one(engine)
    assert len(str(second)) > len(str(first)), "the ids must differ in length for text order to differ"

    with engine.connect() as connection:
        pages = [read_page(connection, Checkpoint(), HORIZON, 1)]
        pages.append(read_page(connection, pages[0][0].checkpoint, HORIZON, 1))

    assert [page[0].transaction_id for page in pages] == [first, second]
