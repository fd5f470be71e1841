"""The sealer: every committed event gets exactly one seal, in horizon order, even under concurrency."""

from __future__ import annotations

import threading
from uuid import uuid4

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from domain.email import EmailQueued, email_stream
from infra.audit import verify as audit, seal as sealer
from infra.eventlog.postgres import PostgresEventStore
from tests.support.audit_log import NOW, queue_one, seed
from tests.support.cli import Env, run_cli


def test_sealing_covers_every_committed_event_once(engine: Engine, env: Env) -> None:
    seed(engine)
    result = sealer.seal(engine, batch_size=5)
    assert result.sealed == 12 and result.head is not None and result.head.chain_index == 11
    assert sealer.seal(engine).sealed == 0, "a second run finds nothing new"
    report = audit.verify(engine)
    assert report.ok and report.check is not None and report.check.checked == 12
    outcome = run_cli(env, "audit", "verify")
    assert outcome.exit_code == 0 and "ok: 12 events match their seals" in outcome.output


def test_the_cli_seals_and_says_where_the_chain_head_is(engine: Engine, env: Env) -> None:
    seed(engine, 2)
    outcome = run_cli(env, "audit", "seal", "--json")
    assert outcome.exit_code == 0, outcome.output
    assert '"sealed": 6' in outcome.stdout and '"chain_index": 5' in outcome.stdout
    assert "sealed 0 events" in run_cli(env, "audit", "seal").stdout


def test_an_event_that_commits_late_is_sealed_in_its_place_not_skipped(engine: Engine) -> None:
    seed(engine, 1)
    with engine.connect() as late:
        transaction = late.begin()
        message_id = uuid4()
        PostgresEventStore(late).append(email_stream(message_id), 0, [EmailQueued(
            message_id=message_id, flow="otp", template="otp_code", user_id="late", request_id=uuid4(),
            recipient="late@example.com", available_at=NOW)])
        seed(engine, 1)  # commits after the late transaction began, with higher transaction ids
        result = sealer.seal(engine)
        assert result.sealed == 3, "the open transaction holds the horizon back"
        assert result.backlog.waiting == 3
        transaction.commit()
    assert sealer.seal(engine).sealed == 4
    with engine.connect() as connection:
        streams = connection.execute(text("SELECT stream_id FROM seals ORDER BY chain_index")).scalars().all()
    assert streams[3] == email_stream(message_id), "sealed in horizon order: before the later commits"
    assert audit.verify(engine).ok


def test_concurrent_sealers_extend_one_chain_without_forking(engine: Engine) -> None:
    failures: list[BaseException] = []
    writing = threading.Event()

    def write() -> None:
        try:
            for n in range(15):
                queue_one(engine, n)
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            failures.append(error)
        finally:
            writing.set()

    def seal_until_written() -> None:
        try:
            while not writing.is_set():
                sealer.seal(engine, batch_size=4)
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            failures.append(error)

    threads = [threading.Thread(target=write)] + [threading.Thread(target=seal_until_written) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not failures, failures
    sealer.seal(engine)
    with engine.connect() as connection:
        indexes = connection.execute(text("SELECT chain_index FROM seals ORDER BY chain_index")).scalars().all()
    assert indexes == list(range(45))
    assert audit.verify(engine).ok


def test_the_seals_table_is_append_only_even_for_its_owner(engine: Engine, admin_engine: Engine) -> None:
    seed(engine, 1)
    sealer.seal(engine)
    for statement in ("UPDATE seals SET link = link", "DELETE FROM seals", "TRUNCATE seals"):
        for role_engine in (engine, admin_engine):
            with pytest.raises(DBAPIError, match="append-only|permission denied"), role_engine.begin() as c:
                c.execute(text(statement))


def test_the_chain_follows_transaction_ids_as_numbers_not_as_text(engine: Engine, admin_engine: Engine) -> None:
    """xid 98 comes before xid 100 (as text it would not): ids grow a digit now and then."""
    with admin_engine.begin() as connection:
        for stream, transaction_id in (("email:a", 100), ("email:b", 98)):
            connection.execute(text("""
                INSERT INTO events (stream_id, stream_version, event_id, event_type, schema_version, payload,
                                    transaction_id)
                VALUES (:stream, 1, gen_random_uuid(), 'DeliverySkipped', 1, '{}', CAST(:tx AS text)::xid8)
            """), {"stream": stream, "tx": str(transaction_id)})
    sealer.seal(engine)
    with engine.connect() as connection:
        streams = connection.execute(text("SELECT stream_id FROM seals ORDER BY chain_index")).scalars().all()
    assert streams == ["email:b", "email:a"]
    assert audit.verify(engine).ok
