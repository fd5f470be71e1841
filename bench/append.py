"""Append throughput of the event store beside raw psycopg INSERTs (issue 2).

    .venv/bin/python bench/append.py [--seconds 5] [--rounds 20] [--quick]

Starts its own embedded PostgreSQL in a temporary directory with the server's
default durability (fsync and synchronous_commit stay on; the output lists
them), creates a fresh database, applies schema.sql, and adds ``raw_events``,
a copy of the ``events`` table's shape (types, defaults, identity, indexes,
unique key; no triggers) for the baseline.

Every client is its own process, so the GIL cannot flatter or hurt the
four-client figures. Each case runs authledger and the baseline in alternating
order over several rounds; the table shows the median rate of each side and
the median of the per-round ratios.

The authledger side calls ``PostgresEventStore.append`` in ``engine.begin()``
on the application role's engine, with a ``LeaseClaimed`` (no personal data)
or, in the last case, an ``EmailQueued`` whose recipient the store seals. The
baseline does what a hand-written application would: psycopg's default
transaction (BEGIN, INSERT, COMMIT) of a row with the same columns, its
payload the JSON text the store wrote for the same event.

The breakdown that follows adds authledger's work to the baseline one piece at
a time on the first case, to show where the time goes; the last line compares
four plain appenders with and without the NOTIFY trigger. The load average is
printed at the end: other work on the machine moves absolute rates more than
ratios.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import hashlib
import multiprocessing
import os
import platform
import queue
import secrets
import shutil
import statistics
import subprocess
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import psycopg
from attrs import frozen
from psycopg.conninfo import make_conninfo
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import make_url

from domain.email import EmailQueued, LeaseClaimed
from infra.db.engine import APP_ROLE, Database
from infra.db.embedded import start_embedded
from infra.eventlog.postgres import PostgresEventStore
from infra.db.schema import init_schema

DATABASE = "authledger_bench"
CLIENTS = 4
COLUMNS = "stream_id, stream_version, event_id, event_type, schema_version, payload, metadata"
SETTINGS = ["fsync", "synchronous_commit", "wal_sync_method", "full_page_writes", "wal_level", "shared_buffers"]
SAMPLE_ROW = text("SELECT event_type, schema_version, payload::text FROM events WHERE stream_id = :stream_id")


def _lease_claimed() -> LeaseClaimed:
    now = datetime.now(UTC)
    return LeaseClaimed(message_id=uuid4(), lease_owner="worker-1", lease_token=uuid4(), claimed_at=now,
                        lease_expires_at=now + timedelta(seconds=30), attempt=1)


def _email_queued() -> EmailQueued:
    return EmailQueued(message_id=uuid4(), flow="reset", template="reset_link", user_id="user-0042",
                       request_id=uuid4(), recipient="someone@example.com", available_at=datetime.now(UTC))


EVENTS = {"plain": _lease_claimed, "personal": _email_queued}


@frozen
class Case:
    name: str
    clients: int
    events: int  # per transaction
    same_stream: bool  # successive appends to one stream per client, else a new stream each time
    kind: str = "plain"  # a key of EVENTS


CASES = [
    Case("1 event/tx, 1 client, new stream each", 1, 1, False),
    Case("1 event/tx, 1 client, same stream", 1, 1, True),
    Case("1 event/tx, 4 clients, new stream each", 4, 1, False),
    Case("1 event/tx, 4 clients, same stream each", 4, 1, True),
    Case("100 events/tx, 1 client, new stream each", 1, 100, False),
    Case("100 events/tx, 1 client, same stream", 1, 100, True),
    Case("1 event/tx, 1 client, new stream each, EmailQueued (recipient sealed)", 1, 1, False, "personal"),
]
# Each step adds one piece of authledger's work to the one before it.
BREAKDOWN = [
    ("raw", "raw INSERT into raw_events (no triggers)"),
    ("raw_into_events", "+ same INSERT into events (NOTIFY trigger)"),
    ("replay", "+ the store's own INSERT statement and parameters, replayed by psycopg"),
    ("replay_all", "+ the store's other statements in an append: {others}"),
    ("authledger", "= PostgresEventStore.append via SQLAlchemy (+ encoding, result objects)"),
]
PLAIN_TABLES = {"raw": "raw_events", "raw_into_events": "events"}
# Whether a replay sends every statement of an append or the INSERT alone. No
# pool ping: a connection back in use within 0.5 s is not pinged (infra.db.engine).
REPLAYS = {"replay": False, "replay_all": True}

Step = Callable[[], int]  # one transaction; returns the number of events appended


def _fresh(value: Any, old_stream: str, new_stream: str) -> Any:
    """Captured driver parameters made into a new append: another stream id, new event ids."""
    if isinstance(value, dict):
        return {key: _fresh(item, old_stream, new_stream) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_fresh(item, old_stream, new_stream) for item in value)
    if isinstance(value, UUID):
        return uuid4()
    return new_stream if value == old_stream else value


class Client:
    """One benchmark client: an authledger engine and a raw psycopg connection to the same database."""

    def __init__(self, app_url: str, raw_conninfo: str, raw_rows: dict[str, tuple[str, int, str]]) -> None:
        self.engine = Database(app_url).engine()
        self.raw = psycopg.connect(raw_conninfo)
        self.raw_rows = raw_rows  # kind -> (event_type, schema_version, payload) as the store wrote them
        self.captured = self._capture_append()

    def _capture_append(self) -> tuple[list[tuple[str, Any]], str]:
        """Every statement, with its driver parameters, that the store sends for a one-event append (rolled back)."""
        captured = []

        def capture(conn, cursor, statement, parameters, context, executemany) -> None:
            captured.append((statement, parameters))

        stream_id = f"email:{uuid4()}"
        with self.engine.connect() as connection, connection.begin() as transaction:
            event.listen(connection, "before_cursor_execute", capture)
            PostgresEventStore(connection).append(stream_id, 0, [_lease_claimed()])
            event.remove(connection, "before_cursor_execute", capture)
            transaction.rollback()
        assert sum("INSERT INTO events" in statement for statement, _ in captured) == 1, captured
        return captured, stream_id

    def other_statements(self) -> str:
        """What the store sends besides its INSERT, for the breakdown's label."""
        captured, _ = self.captured
        names = [" ".join(statement.split()[:2]) for statement, _ in captured if "INSERT INTO events" not in statement]
        return ", ".join(names) or "none"

    def step(self, side: str, case: Case) -> Step:
        """One transaction of ``side``: the store, the plain baseline, or a breakdown step."""
        stream_id, version = f"email:{uuid4()}", 0

        def next_stream() -> tuple[str, int]:
            nonlocal stream_id, version
            if not case.same_stream:
                stream_id, version = f"email:{uuid4()}", 0
            expected, version = version, version + case.events
            return stream_id, expected

        if side == "authledger":
            return self._store_step(next_stream, case)
        if side in PLAIN_TABLES:
            return self._plain_step(PLAIN_TABLES[side], next_stream, case)
        assert case == CASES[0], "the breakdown replays a captured one-event append to a new stream"
        return self._replay_step(REPLAYS[side])

    def _store_step(self, next_stream: Callable[[], tuple[str, int]], case: Case) -> Step:
        batch = [EVENTS[case.kind]() for _ in range(case.events)]  # the caller's objects; append encodes them

        def step() -> int:
            stream_id, expected = next_stream()
            with self.engine.begin() as connection:
                PostgresEventStore(connection).append(stream_id, expected, batch)
            return case.events

        return step

    def _plain_step(self, table: str, next_stream: Callable[[], tuple[str, int]], case: Case) -> Step:
        raw, (tag, version, payload) = self.raw, self.raw_rows[case.kind]
        values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s)"] * case.events)
        sql = f"INSERT INTO {table} ({COLUMNS}) VALUES {values}"  # built from constants only

        def step() -> int:
            stream_id, expected = next_stream()
            params: list[object] = []
            for n in range(1, case.events + 1):
                params += (stream_id, expected + n, uuid4(), tag, version, payload, "{}")
            raw.execute(sql, params)
            raw.commit()
            return case.events

        return step

    def _replay_step(self, everything: bool) -> Step:
        """The store's SQL and parameters through bare psycopg: its INSERT alone, or every statement it sends."""
        raw, (captured, captured_stream) = self.raw, self.captured
        statements = captured if everything else [c for c in captured if "INSERT INTO events" in c[0]]

        def step() -> int:
            new_stream = f"email:{uuid4()}"
            for statement, parameters in statements:
                cursor = raw.execute(statement, _fresh(parameters, captured_stream, new_stream) or None)
                if "INSERT INTO events" in statement:
                    assert len(cursor.fetchall()) == 1
            raw.commit()
            return 1

        return step

    def close(self) -> None:
        self.raw.close()
        self.engine.dispose()


@frozen
class Sample:
    """One run of one side: events per second, and the client's own CPU time per event."""

    rate: float
    cpu_us: float


def _measure(step: Step, start_at: float, seconds: float) -> Sample:
    time.sleep(max(0.0, start_at - time.time()))
    appended, begin, cpu = 0, time.perf_counter(), time.process_time()
    end = begin + seconds
    while (now := time.perf_counter()) < end:
        appended += step()
    return Sample(appended / (now - begin), (time.process_time() - cpu) * 1e6 / appended)


def _worker(app_url: str, raw_conninfo: str, raw_rows: dict, commands: Any, results: Any) -> None:
    # Any failure goes back to the parent, which reports it instead of waiting forever.
    try:
        client = Client(app_url, raw_conninfo, raw_rows)
    except Exception:  # noqa: BLE001
        results.put(("error", traceback.format_exc()))
        return
    results.put(("ready", client.other_statements()))
    try:
        for side, case, start_at, seconds in iter(commands.get, None):
            try:
                results.put(("ok", _measure(client.step(side, case), start_at, seconds)))
            except Exception:  # noqa: BLE001
                results.put(("error", traceback.format_exc()))
    finally:
        client.close()


class Clients:
    """Four client processes, told what to run and when to start, so they run side by side."""

    def __init__(self, app_url: str, raw_conninfo: str, raw_rows: dict) -> None:
        context = multiprocessing.get_context("spawn")
        self.results = context.Queue()
        self.queues = [context.Queue() for _ in range(CLIENTS)]
        self.processes = [
            context.Process(target=_worker, args=(app_url, raw_conninfo, raw_rows, q, self.results), daemon=True)
            for q in self.queues
        ]
        for process in self.processes:
            process.start()
        self.other_statements = self._collect(CLIENTS, "start-up", timeout=120)[0]

    def _collect(self, count: int, what: str, timeout: float) -> list[Any]:
        values = []
        for _ in range(count):
            try:
                status, value = self.results.get(timeout=timeout)
            except queue.Empty:
                raise RuntimeError(f"a client did not answer within {timeout:g} s ({what})") from None
            if status == "error":
                raise RuntimeError(f"a client failed ({what}):\n{value}")
            values.append(value)
        return values

    def run(self, side: str, case: Case, seconds: float) -> Sample:
        start_at = time.time() + 0.05
        for q in self.queues[: case.clients]:
            q.put((side, case, start_at, seconds))
        samples = self._collect(case.clients, f"{side}, {case.name}", timeout=seconds + 60)
        return Sample(sum(s.rate for s in samples), statistics.mean(s.cpu_us for s in samples))

    def close(self) -> None:
        for q in self.queues:
            q.put(None)
        for process in self.processes:
            process.join(timeout=30)


@frozen
class Result:
    """Medians over the rounds; ``ratio`` is the median of per-round rate ratios to the first side."""

    rate: float
    cpu_us: float
    ratio: float


def _medians(clients: Clients, sides: list[str], case: Case, seconds: float, rounds: int) -> dict[str, Result]:
    """Alternate the sides round by round (A B, B A, ...) after one untimed warm-up of each.

    Other work on the machine moves every rate in a round alike, so the ratio
    of two sides is taken within each round before the median.
    """
    per_run = seconds / rounds
    for side in sides:
        clients.run(side, case, min(per_run, 0.5))
    samples: dict[str, list[Sample]] = {side: [] for side in sides}
    for round_ in range(rounds):
        for side in sides if round_ % 2 == 0 else reversed(sides):
            samples[side].append(clients.run(side, case, per_run))
    reference = samples[sides[0]]
    return {
        side: Result(
            statistics.median(s.rate for s in runs),
            statistics.median(s.cpu_us for s in runs),
            statistics.median(s.rate / r.rate for s, r in zip(runs, reference, strict=True)),
        )
        for side, runs in samples.items()
    }


def _prepare_database(server_uri: str) -> tuple[str, str, dict[str, str]]:
    """Create the bench database with schema.sql and raw_events; return app URL, raw conninfo, settings."""
    admin_url = make_url(server_uri.replace("postgresql://", "postgresql+psycopg://", 1))
    server = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with server.connect() as connection:
        connection.execute(text(f"CREATE DATABASE {DATABASE}"))
        settings = {"server_version": connection.execute(text("SHOW server_version")).scalar_one()}
        settings |= {name: connection.execute(text(f"SHOW {name}")).scalar_one() for name in SETTINGS}
    server.dispose()
    bench_url = admin_url.set(database=DATABASE).render_as_string(hide_password=False)
    admin = create_engine(bench_url)
    init_schema(admin)
    with admin.begin() as connection:
        # The baseline's table: the same shape as events, without its triggers.
        connection.execute(text("CREATE TABLE raw_events (LIKE events INCLUDING ALL)"))
        connection.execute(text(f"GRANT SELECT, INSERT ON raw_events TO {APP_ROLE}"))
    admin.dispose()
    raw_conninfo = make_conninfo(server_uri, dbname=DATABASE, options=f"-c role={APP_ROLE}")
    return bench_url, raw_conninfo, settings


def _raw_rows(app_url: str) -> dict[str, tuple[str, int, str]]:
    """Per kind of event, the (event_type, schema_version, payload) the store writes: the baseline inserts those."""
    engine = Database(app_url).engine()
    rows = {}
    for kind, make in EVENTS.items():
        stream_id = f"email:{uuid4()}"
        with engine.begin() as connection:
            PostgresEventStore(connection).append(stream_id, 0, [make()])
            rows[kind] = tuple(connection.execute(SAMPLE_ROW, {"stream_id": stream_id}).one())
    engine.dispose()
    return rows


def _code_version() -> str:
    """The commit, and digests of the two files measured, which may hold uncommitted changes."""
    root = Path(__file__).resolve().parent.parent
    git = ["git", "-C", str(root)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], check=False, capture_output=True, text=True)
    digests = ", ".join(
        f"{name} {hashlib.sha256((root / name).read_bytes()).hexdigest()[:10]}"
        for name in ("schema.sql", "infra/eventlog/postgres.py")
    )
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "schema.sql", "infra/"],
                           check=False, capture_output=True, text=True).stdout.strip()
    return f"{head.stdout.strip() or 'unknown'}{' + uncommitted changes' if dirty else ''} ({digests})"


def _print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                        for i, (cell, w) in enumerate(zip(row, widths, strict=True))))


def _report(clients: Clients, seconds: float, rounds: int) -> None:
    rows = []
    for case in CASES:
        ours, raw = (m := _medians(clients, ["raw", "authledger"], case, seconds, rounds))["authledger"], m["raw"]
        rows.append([case.name, f"{ours.rate:,.0f}", f"{raw.rate:,.0f}", f"{ours.ratio:.2f}",
                     f"{ours.cpu_us:.0f} / {raw.cpu_us:.0f}"])
    _print_table(["case", "authledger events/s", "raw events/s", "ratio", "client CPU µs/event"], rows)

    print(f"\nwhere the time goes: {CASES[0].name}; each step adds one thing to the one above;"
          " µs/event is the raw median divided by the step's median per-round ratio")
    steps = _medians(clients, [side for side, _ in BREAKDOWN], CASES[0], seconds, rounds)
    raw_us = 1e6 / steps["raw"].rate
    rows, previous = [], None
    for side, label in BREAKDOWN:
        micros = raw_us / steps[side].ratio
        added = "" if previous is None else f"{micros - previous:+.0f}"
        label = label.format(others=clients.other_statements)
        rows.append([label, f"{steps[side].ratio:.2f}", f"{micros:.0f}", added, f"{steps[side].cpu_us:.0f}"])
        previous = micros
    _print_table(["step", "rate vs raw", "µs/event", "added µs", "client CPU µs/event"], rows)

    # NOTIFY takes a cluster-wide lock at commit: does it serialize concurrent appenders?
    notify = _medians(clients, ["raw", "raw_into_events"], CASES[2], seconds, rounds)
    print(f"\nNOTIFY trigger, {CASES[2].name}: plain INSERT into raw_events {notify['raw'].rate:,.0f} events/s,"
          f" into events {notify['raw_into_events'].rate:,.0f} events/s"
          f" (ratio {notify['raw_into_events'].ratio:.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per side of each case (default 5)")
    parser.add_argument("--rounds", type=int, default=20, help="alternating runs per side (default 20)")
    parser.add_argument("--quick", action="store_true", help="1 s per side and 3 rounds: a smoke test for CI")
    args = parser.parse_args()
    seconds, rounds = (1.0, 3) if args.quick else (args.seconds, args.rounds)

    # Sealing EmailQueued.recipient needs a master key; a throwaway one will do.
    key = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
    os.environ.setdefault("AUTHLEDGER_MASTER_KEY", f"bench:{key}")
    data_dir = Path(tempfile.mkdtemp(prefix="authledger-bench-"))
    # atexit runs last-in first-out: the embedded server (registered later)
    # stops before its directory is removed.
    atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
    app_url, raw_conninfo, settings = _prepare_database(start_embedded(data_dir))

    print(f"PostgreSQL {settings.pop('server_version')} (embedded, unix socket, data in {data_dir})")
    print("durability: " + ", ".join(f"{name}={value}" for name, value in settings.items()))
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()},"
          f" psycopg {psycopg.__version__}; each client a process")
    print(f"code: {_code_version()}")
    print(f"{seconds:g} s per side per case in {rounds} alternating rounds;"
          " events/s are medians, ratios the median of per-round ratios\n")

    load_before = os.getloadavg()[0]
    clients = Clients(app_url, raw_conninfo, _raw_rows(app_url))
    try:
        _report(clients, seconds, rounds)
    finally:
        clients.close()
    print(f"load average (1 min) before {load_before:.2f}, after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
