"""Sealing the log into a hash chain, and finding the first event that was tampered with."""

from __future__ import annotations

import base64
import contextlib
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from uuid import uuid4

from click.testing import CliRunner
from sqlalchemy import Connection, Engine, text

from cli import cli
from domain.email import EmailQueued, LeaseExpired, email_stream
from infra import audit, sealer
from infra.postgres_store import PostgresEventStore

SIGNING_KEY = base64.b64encode(bytes(range(32))).decode()
NOW = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def send_one(engine: Engine, n: int) -> str:
    """One email queued and twice leased in vain, appended in three transactions like workers would."""
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
    return [send_one(engine, n) for n in range(messages)]


def run(database_url: str, *args: str, **env: str | None) -> tuple[int, str]:
    result = CliRunner().invoke(
        cli, list(args), env={"DATABASE_URL": database_url, "AUTHLEDGER_SIGNING_KEY": SIGNING_KEY, **env}
    )
    return result.exit_code, result.output


def position_of(engine: Engine, stream: str, version: int) -> int:
    with engine.connect() as connection:
        return connection.execute(
            text("SELECT global_position FROM events WHERE stream_id = :s AND stream_version = :v"),
            {"s": stream, "v": version},
        ).scalar_one()


@contextlib.contextmanager
def tampering(admin_engine: Engine, table: str = "events") -> Iterator[Connection]:
    """What a superuser can do: switch the append-only guards off, change history, switch them on."""
    with admin_engine.begin() as connection:
        connection.execute(text(f"ALTER TABLE {table} DISABLE TRIGGER USER"))
        yield connection
        connection.execute(text(f"ALTER TABLE {table} ENABLE TRIGGER USER"))


def test_sealing_covers_every_committed_event_and_verifies(engine: Engine, database_url: str) -> None:
    seed(engine)
    result = sealer.seal(engine, batch_size=5)
    assert result.sealed == 12 and result.head is not None and result.head.chain_index == 11
    assert sealer.seal(engine).sealed == 0, "a second run finds nothing new"
    report = audit.verify(engine)
    assert report.ok and report.check is not None and report.check.checked == 12
    code, output = run(database_url, "audit", "verify")
    assert code == 0 and "ok: 12 events match their seals" in output


def test_the_seals_table_is_append_only_for_the_application(engine: Engine) -> None:
    seed(engine, 1)
    sealer.seal(engine)
    with engine.connect() as connection:
        for statement in ("UPDATE seals SET link = link", "DELETE FROM seals", "TRUNCATE seals"):
            with connection.begin():
                try:
                    connection.execute(text(statement))
                except Exception as error:  # noqa: BLE001 - any refusal will do; we assert on the message
                    assert "append-only" in str(error) or "permission denied" in str(error)
                else:
                    raise AssertionError(f"{statement} was allowed")
