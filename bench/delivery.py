"""Delivery throughput, EmailQueued to ProviderAccepted, beside a raw SKIP LOCKED loop and pgqueuer (issue 3).

    .venv/bin/python bench/delivery.py [--messages 2000] [--workers 1,2,4] [--rounds 3] [--quick] [--profile]
    .venv/bin/python bench/delivery.py --profile-only [--messages 1000]

Starts its own embedded PostgreSQL in a temporary directory with the server's
default durability (fsync and synchronous_commit stay on; the output lists
them) and builds one template database holding all three contenders:
schema.sql, ``bench_jobs`` (the raw loop's plain jobs table) and pgqueuer's
schema, installed by its own ``pgqueuer install`` CLI. Every run gets a fresh
copy of that template, so no run drains a database that earlier runs grew.

A run queues N messages first (not timed), then starts the worker processes;
the clock starts when every process has connected and waits at a barrier,
and stops when the last process finds nothing left to claim. Each worker is
its own process, so the GIL neither flatters nor hurts the multi-worker
figures:

- authledger: ``Worker(ctx, NoopMailer(), batch=10).drain()``
  on the application role's engine. Messages are reset links of distinct
  users, so every delivery loads a one-request stream, renders the link and
  records ``ProviderAccepted`` fenced by its lease. The no-op provider says
  it drops repeated message ids, as Maildir and the HTTP provider do, so a
  batch's outcomes are recorded together after its last send. Delivery log
  lines are formatted as the worker CLI does and written to /dev/null.
- authledger per send: the same with a provider that does not drop repeats
  (as SMTP): each outcome is recorded in its own transaction right after its
  send.
- raw: one UPDATE ... WHERE id IN (SELECT ... LIMIT 10 FOR UPDATE SKIP
  LOCKED) RETURNING claims ten rows, a second UPDATE marks them sent;
  autocommit, prepared by psycopg after five runs. The technique's ceiling.
- pgqueuer: a ``QueueManager`` per process on asyncpg when it is installed
  (pgqueuer's own default; else its psycopg driver) and uvloop, batch size
  10, drain mode, an entrypoint that does nothing. Its clock stops when the
  last batch of job outcomes is written: drain mode probes the queue a few
  more times before returning, which is not delivery work.

The sides alternate in order round by round; the table shows medians, and
each ratio is the median of the per-round ratios. After every run the bench
checks that each message was handled exactly once (for authledger: N
``ProviderAccepted`` events on N streams, every outbox row ``sent``, N calls
to the provider). ``--profile`` then drains N messages with one worker under
cProfile on the CPU clock and shows where authledger's CPU goes, and compares
the fresh read per message (``prepare``) with one per batch (``prepare_all``).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import base64
import contextlib
import cProfile
import multiprocessing
import os
import platform
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import uuid4

import psycopg
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url

from domain.email import email_stream
from domain.policy import ResetPolicy
from domain.reset import RequestReset, decide_reset_request
from domain.reset_events import reset_stream
from domain.reset_state import initial_reset_state
from domain.tokens import TokenKeys
from infra.db.engine import Database, ping
from infra.db.embedded import start_embedded
from infra.logs import configure_logging
from infra.delivery.providers import OutboundEmail, ProviderReceipt
from infra.db.schema import init_schema
from infra.services.unit_of_work import ServiceContext, append_and_fold, random_nonce
from infra.delivery.worker import Worker

TEMPLATE = "delivery_template"
SIDES = ("authledger", "authledger per send", "raw", "pgqueuer")
AUTHLEDGER_SIDES = ("authledger", "authledger per send")
BATCH = 10
SENDER = "bench@example.com"
KEYS = TokenKeys("bench", {"bench": b"bench-key-0123456789abcdef-0123456"})
SETTINGS = ["fsync", "synchronous_commit", "wal_sync_method", "full_page_writes", "commit_delay",
            "shared_buffers", "max_connections"]

JOBS_TABLE = """
    CREATE TABLE bench_jobs (
        id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        status        text        NOT NULL DEFAULT 'pending',
        available_at  timestamptz NOT NULL DEFAULT now(),
        payload       jsonb       NOT NULL
    );
    CREATE INDEX bench_jobs_pending ON bench_jobs (available_at) WHERE status = 'pending';
"""
QUEUE_JOBS = "INSERT INTO bench_jobs (payload) SELECT jsonb_build_object('n', n) FROM generate_series(1, %s) n"
CLAIM_JOBS = """
    UPDATE bench_jobs SET status = 'leased'
     WHERE id IN (SELECT id FROM bench_jobs
                   WHERE status = 'pending' AND available_at <= now()
                   ORDER BY available_at LIMIT %(batch)s
                     FOR UPDATE SKIP LOCKED)
    RETURNING id, payload
"""
MARK_SENT = "UPDATE bench_jobs SET status = 'sent' WHERE id = ANY(%s)"


class NoopMailer:
    """A provider that accepts everything at once and counts the calls."""

    name = "noop"
    timeout_seconds = 1.0

    def __init__(self, *, idempotent: bool = True) -> None:
        self.idempotent = idempotent
        self.sends = 0
        self._lock = threading.Lock()

    def send(self, email: OutboundEmail) -> ProviderReceipt:
        with self._lock:
            self.sends += 1
        return ProviderReceipt(self.name, f"noop-{email.message_id}")


class Server:
    """The embedded server: an admin connection for DDL and a URL for each database."""

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def url(self, database: str, driver: str = "postgresql") -> str:
        """A libpq URI (psycopg and asyncpg read it alike), or SQLAlchemy's with a driver name."""
        url = make_url(self.uri).set(drivername=driver, database=database)
        return url.render_as_string(hide_password=False)

    def execute(self, statement: str, database: str = "postgres") -> list[tuple]:
        with psycopg.connect(self.url(database), autocommit=True) as connection:
            cursor = connection.execute(statement)
            return cursor.fetchall() if cursor.description else []


def _prepare_template(server: Server) -> dict[str, str]:
    """Create the template database with all three schemas; return the server's settings."""
    server.execute(f"CREATE DATABASE {TEMPLATE}")
    admin = create_engine(server.url(TEMPLATE, "postgresql+psycopg"))
    init_schema(admin)
    admin.dispose()
    server.execute(JOBS_TABLE, TEMPLATE)
    installed = subprocess.run([sys.executable, "-m", "pgqueuer", "--pg-dsn", server.url(TEMPLATE), "install"],
                               capture_output=True, text=True)
    if installed.returncode != 0:
        raise SystemExit(f"`pgqueuer install` failed (is the bench extra installed? pip install "
                         f"'pgqueuer[asyncpg]>=0.18'):\n{installed.stderr.strip()[-2000:]}")
    settings = {"server_version": server.execute("SHOW server_version")[0][0]}
    return settings | {name: server.execute(f"SHOW {name}")[0][0] for name in SETTINGS}


def _queue(side: str, server: Server, database: str, messages: int) -> None:
    if side in AUTHLEDGER_SIDES:
        _queue_resets(Database(server.url(database, "postgresql+psycopg")).engine(pool_size=1), messages)
    elif side == "raw":
        server.execute(QUEUE_JOBS % int(messages), database)
    else:
        asyncio.run(_queue_pgqueuer(server.url(database), messages))


def _queue_resets(engine: Engine, messages: int, chunk: int = 500) -> None:
    """Reset requests of distinct users, as ``record_decision`` appends them, many per transaction."""
    now = datetime.now(UTC)
    for start in range(0, messages, chunk):
        batches = []
        for n in range(start, min(start + chunk, messages)):
            user = f"user-{n:06d}"
            decision = decide_reset_request(
                initial_reset_state(), RequestReset(user, f"{user}@example.com"), now=now,
                request_id=uuid4(), message_id=uuid4(), nonce=random_nonce(), keys=KEYS, policy=ResetPolicy(),
            )
            batches.append((reset_stream(user), 0, decision.events))
            batches += [(email_stream(queued.message_id), 0, [queued]) for queued in decision.emails]
        with engine.begin() as connection:
            append_and_fold(connection, batches, {"actor": "bench"})
    engine.dispose()


def _pgqueuer_driver() -> str:
    """pgqueuer's own default: asyncpg when it is installed, else psycopg (as its CLI chooses)."""
    try:
        import asyncpg  # noqa: F401
    except ImportError:
        return "psycopg"
    return "asyncpg"


async def _pgqueuer_queries(url: str, queries_class: type | None = None) -> tuple[Any, Any]:
    """pgqueuer's ``Queries`` on a new connection, and the connection (the caller closes it)."""
    from pgqueuer.db import AsyncpgDriver, PsycopgDriver
    from pgqueuer.queries import Queries

    queries_class = queries_class or Queries
    if _pgqueuer_driver() == "asyncpg":
        import asyncpg

        connection = await asyncpg.connect(url)
        return queries_class(AsyncpgDriver(connection)), connection
    connection = await psycopg.AsyncConnection.connect(url, autocommit=True)
    return queries_class(PsycopgDriver(connection)), connection


async def _queue_pgqueuer(url: str, messages: int) -> None:
    queries, connection = await _pgqueuer_queries(url)
    await queries.enqueue(["noop"] * messages, [b"{}"] * messages, [0] * messages)
    await connection.close()


# --- the worker processes: each side's set-up returns its drain, run after the barrier ---

Drain = Callable[[], dict[str, int]]


def _authledger_setup(
    server: Server, database: str, index: int, *, idempotent: bool = True
) -> tuple[Worker, NoopMailer]:
    # Delivery lines are formatted as `authledger worker` does, then dropped:
    # the handler keeps the stream it was given, which stays open for good.
    with contextlib.redirect_stderr(open(os.devnull, "w")):
        configure_logging("json")
    engine = Database(server.url(database, "postgresql+psycopg")).engine(pool_size=2)
    ping(engine)
    mailer = NoopMailer(idempotent=idempotent)
    worker = Worker(ServiceContext(engine=engine, keys=KEYS), mailer, sender=SENDER, owner=f"bench-{index}",
                    batch=BATCH)
    return worker, mailer


def _authledger_tally(worker: Worker, mailer: NoopMailer) -> dict[str, int]:
    worker.ctx.engine.dispose()
    sent = worker.delivered.get("sent", 0)
    return {"sent": sent, "other": sum(worker.delivered.values()) - sent, "provider_calls": mailer.sends}


def _authledger_worker(server: Server, database: str, index: int, *, idempotent: bool = True) -> Drain:
    worker, mailer = _authledger_setup(server, database, index, idempotent=idempotent)

    def drain() -> dict[str, int]:
        worker.drain()
        return _authledger_tally(worker, mailer)

    return drain


def _authledger_per_send_worker(server: Server, database: str, index: int) -> Drain:
    return _authledger_worker(server, database, index, idempotent=False)


def _raw_worker(server: Server, database: str, index: int) -> Drain:
    connection = psycopg.connect(server.url(database), autocommit=True)

    def drain() -> dict[str, int]:
        done = 0
        while rows := connection.execute(CLAIM_JOBS, {"batch": BATCH}).fetchall():
            connection.execute(MARK_SENT, ([row[0] for row in rows],))
            done += len(rows)
        connection.close()
        return {"sent": done}

    return drain


def _pgqueuer_worker(server: Server, database: str, index: int) -> Drain:
    import uvloop
    from pgqueuer import QueueManager
    from pgqueuer.queries import Queries
    from pgqueuer.types import QueueExecutionMode

    class TimedQueries(Queries):
        """Notes when job outcomes were last written: the drain's true end.

        Drain mode then probes the queue a few more times before ``run``
        returns (with the psycopg driver each probe can wait up to a second
        for the connection its listener holds); that tail is not timed.
        """

        finished_at = 0.0

        async def log_jobs(self, job_status: list) -> None:
            await super().log_jobs(job_status)
            self.finished_at = time.monotonic()

    loop = uvloop.new_event_loop()
    queries, connection = loop.run_until_complete(_pgqueuer_queries(server.url(database), TimedQueries))
    manager = QueueManager(queries)
    done = 0

    @manager.entrypoint("noop")
    async def noop(job: object) -> None:
        nonlocal done
        done += 1

    def drain() -> dict[str, int]:
        loop.run_until_complete(manager.run(batch_size=BATCH, mode=QueueExecutionMode.drain))
        loop.run_until_complete(connection.close())
        return {"sent": done, "finished_at": queries.finished_at}

    return drain


WORKERS: dict[str, Callable[[Server, str, int], Drain]] = {
    "authledger": _authledger_worker, "authledger per send": _authledger_per_send_worker,
    "raw": _raw_worker, "pgqueuer": _pgqueuer_worker,
}


def _process(side: str, uri: str, database: str, index: int, barrier, results) -> None:
    try:
        drain = WORKERS[side](Server(uri), database, index)
    except Exception:  # noqa: BLE001 - sent to the parent, which prints it and stops the run
        barrier.abort()
        results.put(("error", traceback.format_exc()))
        return
    barrier.wait()
    cpu_at_start = time.process_time()
    try:
        tally = drain()
    except Exception:  # noqa: BLE001 - sent to the parent, which prints it and stops the run
        results.put(("error", traceback.format_exc()))
        return
    end, cpu = time.monotonic(), time.process_time() - cpu_at_start
    results.put(("ok", (tally.pop("finished_at", end), cpu, tally)))


# --- one run: fresh database, queue, drain with N processes, verify ---

def _verify(side: str, server: Server, database: str, messages: int, tallies: list[dict[str, int]]) -> None:
    """Raise unless every message was handled exactly once."""
    if side in AUTHLEDGER_SIDES:
        accepted, streams = server.execute(
            "SELECT count(*), count(DISTINCT stream_id) FROM events WHERE event_type = 'ProviderAccepted'", database
        )[0]
        states = dict(server.execute("SELECT state, count(*) FROM email_outbox GROUP BY state", database))
        calls = sum(t["provider_calls"] for t in tallies)
        ok = accepted == streams == calls == messages and states == {"sent": messages}
        found = f"ProviderAccepted {accepted} on {streams} streams, outbox {states}, provider calls {calls}"
    elif side == "raw":
        states = dict(server.execute("SELECT status, count(*) FROM bench_jobs GROUP BY status", database))
        ok, found = states == {"sent": messages}, f"jobs {states}"
    else:
        left = server.execute("SELECT count(*) FROM pgqueuer", database)[0][0]
        done, distinct = server.execute(
            "SELECT count(*), count(DISTINCT job_id) FROM pgqueuer_log WHERE status = 'successful'", database
        )[0]
        ok = left == 0 and done == distinct == messages
        found = f"{left} jobs left, {done} successful log rows for {distinct} jobs"
    handled = sum(t["sent"] for t in tallies)
    if not ok or handled != messages:
        raise RuntimeError(f"{side}: expected {messages} handled once; found {found}, workers counted {handled}")


def _run(side: str, workers: int, server: Server, messages: int) -> tuple[float, float]:
    """Messages per second and worker CPU µs per message for one drain."""
    database = f"run_{uuid4().hex[:12]}"
    server.execute(f"CREATE DATABASE {database} TEMPLATE {TEMPLATE}")
    try:
        _queue(side, server, database, messages)
        server.execute("CHECKPOINT")  # the queueing's dirty pages are not the drain's to write
        context = multiprocessing.get_context("spawn")
        barrier, results = context.Barrier(workers + 1), context.Queue()
        processes = [
            context.Process(target=_process, args=(side, server.uri, database, n, barrier, results), daemon=True)
            for n in range(workers)
        ]
        for process in processes:
            process.start()
        try:
            barrier.wait(timeout=120)
        except threading.BrokenBarrierError:
            raise RuntimeError(f"{side} worker failed to start:\n{results.get(timeout=10)[1]}") from None
        start = time.monotonic()
        outcomes = [results.get(timeout=600) for _ in processes]
        for process in processes:
            process.join(timeout=30)
        errors = [value for status, value in outcomes if status == "error"]
        if errors:
            raise RuntimeError(f"{side} worker failed:\n{errors[0]}")
        elapsed = max(end for end, _, _ in (value for _, value in outcomes)) - start
        _verify(side, server, database, messages, [tally for _, (_, _, tally) in outcomes])
        cpu = sum(cpu for _, (_, cpu, _) in outcomes)
        return messages / elapsed, cpu * 1e6 / messages
    finally:
        server.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


# --- the profile: one authledger worker under cProfile ---

PROFILE_ROWS = [
    # (label, module path suffix, function names); cumulative time, so indented rows are part of the one above
    ("claim transaction (one per batch of 10, shared out)", "infra/delivery/worker.py", ("claim",)),
    ("  the claim statement (lock, append, update)", "infra/eventlog/email_leases.py", ("claim_due_leases",)),
    ("deliver, total", "infra/delivery/send.py", ("deliver_batch",)),
    ("  prepare: fresh read, fold, render", "infra/delivery/fresh.py", ("prepare",)),
    ("    request snapshot and data keys, one statement", "infra/projector/snapshots.py", ("load_for_decision",)),
    ("      snapshot decode (JSON to attrs via cattrs)", "infra/projector/snapshots.py", ("decode_snapshot",)),
    ("    token derivation, link, templates", "domain/templates.py", ("reset_link",)),
    ("  provider send (no-op)", "bench/delivery.py", ("send",)),
    ("  fenced record, one per batch: fold, encode, one statement", "infra/delivery/leases.py",
     ("record_outcomes",)),
    ("    the record statement", "infra/eventlog/email_leases.py", ("append_fenced",)),
    ("  delivery log line", "infra/logs.py", ("log_event",)),
    ("across all of the above:", "", ()),
    ("  COMMIT", "psycopg/connection.py", ("commit",)),
    ("  pool checkout", "sqlalchemy/pool/base.py", ("_checkout",)),
    ("  switching autocommit on and off (send.py, per message)", "sqlalchemy/engine/default.py",
     ("_set_connection_characteristics",)),
    ("  psycopg waiting on the server (Connection.wait, own CPU)", "psycopg/connection.py", ("wait",)),
]


def _profile(server: Server, messages: int) -> None:
    database = f"profile_{uuid4().hex[:12]}"
    server.execute(f"CREATE DATABASE {database} TEMPLATE {TEMPLATE}")
    try:
        _queue("authledger", server, database, messages)
        server.execute("CHECKPOINT")
        worker, mailer = _authledger_setup(server, database, 0)
        profiler = cProfile.Profile(time.process_time)  # CPU, not wall time: the machine is shared
        start, cpu_start = time.perf_counter(), time.process_time()
        profiler.enable()
        while worker.run_once():  # drain() on this thread: cProfile sees one thread only
            pass
        profiler.disable()
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        _verify("authledger", server, database, messages, [_authledger_tally(worker, mailer)])
    finally:
        server.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
    stats = pstats.Stats(profiler).stats

    print(f"\none authledger worker under cProfile (CPU clock): {messages} messages in {elapsed:.2f} s "
          f"({messages / elapsed:,.0f} msg/s; the profiler slows Python, not the server)")
    rows = []
    for label, suffix, names in PROFILE_ROWS:
        found = [value for (file, _, func), value in stats.items() if func in names and file.endswith(suffix)]
        if not names:
            rows.append([label, "", "", ""])
            continue
        calls = sum(value[1] for value in found)
        seconds = sum(value[2 if names == ("wait",) else 3] for value in found)
        rows.append([label, f"{calls / messages:.2f}", f"{seconds * 1e6 / messages:.0f}",
                     f"{100 * seconds / cpu:.0f}%"])
    _print_table(["where the CPU goes", "calls/msg", "CPU µs/msg", "share"], rows)
    print("\nhottest functions by own time:")
    top = sorted(stats.items(), key=lambda item: item[1][2], reverse=True)[:12]
    _print_table(["function", "calls/msg", "own µs/msg"], [
        [f"{'/'.join(Path(file).parts[-2:])}:{line} {func}", f"{value[1] / messages:.2f}",
         f"{value[2] * 1e6 / messages:.1f}"]
        for (file, line, func), value in top
    ])


def _fresh_read_cost(server: Server, messages: int, rounds: int = 3) -> None:
    """CPU per message of the fresh read: ``prepare`` per message (the worker today) vs ``prepare_all`` per batch."""
    from infra.delivery.fresh import prepare, prepare_all
    from infra.delivery.leases import claim_due

    database = f"fresh_{uuid4().hex[:12]}"
    server.execute(f"CREATE DATABASE {database} TEMPLATE {TEMPLATE}")
    try:
        _queue("authledger", server, database, messages)
        worker, _ = _authledger_setup(server, database, 0)
        ctx = worker.ctx
        with ctx.engine.begin() as connection:
            claims = claim_due(connection, owner="bench", limit=messages, now=ctx.clock.now(),
                               policy=ctx.delivery_policy)
        batches = [claims[i:i + BATCH] for i in range(0, len(claims), BATCH)]
        costs: dict[str, list[float]] = {"per message": [], "per batch": []}
        with ctx.engine.connect() as connection:
            for _ in range(rounds):
                start = time.process_time()
                for claim in claims:
                    prepare(ctx, claim, sender=SENDER, connection=connection)
                costs["per message"].append(time.process_time() - start)
                start = time.process_time()
                for batch in batches:
                    prepare_all(ctx, batch, sender=SENDER, connection=connection)
                costs["per batch"].append(time.process_time() - start)
        ctx.engine.dispose()
    finally:
        server.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
    print(f"\nfresh read, {len(claims)} claimed messages, CPU µs/msg, median of {rounds}: "
          + ", ".join(f"{how} {statistics.median(c) * 1e6 / len(claims):.0f}" for how, c in costs.items())
          + f" (batches of {BATCH})")


# --- driver ---

def _print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                        for i, (cell, w) in enumerate(zip(row, widths, strict=True))))


def _code_version() -> str:
    root = Path(__file__).resolve().parent.parent
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "schema.sql", "infra/", "domain/"],
                           capture_output=True, text=True).stdout.strip()
    return f"{head.stdout.strip() or 'unknown'}{' + uncommitted changes in schema.sql/infra/domain' if dirty else ''}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000, help="messages queued per run (default 2000)")
    parser.add_argument("--workers", default="1,2,4", help="worker process counts (default 1,2,4)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating runs per side and count (default 3)")
    parser.add_argument("--quick", action="store_true", help="200 messages, 1 round: a smoke test for CI")
    parser.add_argument("--profile", action="store_true", help="then profile one authledger worker")
    parser.add_argument("--profile-only", action="store_true", help="only profile one authledger worker")
    args = parser.parse_args()
    messages, rounds = (200, 1) if args.quick else (args.messages, args.rounds)
    counts = [int(n) for n in args.workers.split(",")]

    # Personal fields in the log are sealed under a master key, which engines
    # that no composition root bound read from the environment (workers inherit it).
    os.environ.setdefault("AUTHLEDGER_MASTER_KEY", f"bench:{base64.urlsafe_b64encode(os.urandom(32)).decode()}")
    data_dir = Path(tempfile.mkdtemp(prefix="authledger-bench-delivery-"))
    atexit.register(shutil.rmtree, data_dir, ignore_errors=True)  # runs after the server's own exit hook
    server = Server(start_embedded(data_dir))
    settings = _prepare_template(server)
    import pgqueuer

    print(f"PostgreSQL {settings.pop('server_version')} (embedded, unix socket, data in {data_dir})")
    print("durability: " + ", ".join(f"{name}={value}" for name, value in settings.items()))
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} at start, "
          f"Python {platform.python_version()}, psycopg {psycopg.__version__}, "
          f"pgqueuer {pgqueuer.__version__} on {_pgqueuer_driver()}")
    print(f"code: {_code_version()}")
    print(f"{messages} messages per run, batch {BATCH}, {rounds} alternating rounds; each worker a process\n")

    if args.profile_only:
        _profile(server, messages)
        _fresh_read_cost(server, messages)
        return
    samples: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for round_ in range(rounds):
        for position, workers in enumerate(counts):
            order = SIDES if (round_ + position) % 2 == 0 else tuple(reversed(SIDES))
            for side in order:
                rate, cpu = _run(side, workers, server, messages)
                samples.setdefault((side, workers), []).append((rate, cpu))
                print(f"  round {round_ + 1}, {workers} worker(s), {side:<19} {rate:>9,.0f} msg/s", flush=True)

    print(f"\nmessages/s, median of {rounds} (worker CPU µs/msg in brackets); ratios are medians of per-round ratios")
    rows = []
    for workers in counts:
        runs = {side: samples[(side, workers)] for side in SIDES}
        rate = {side: statistics.median(r for r, _ in runs[side]) for side in SIDES}
        cpu = {side: statistics.median(c for _, c in runs[side]) for side in SIDES}
        ratios = [statistics.median(a[0] / b[0] for a, b in zip(runs[ours], runs[other], strict=True))
                  for ours in AUTHLEDGER_SIDES for other in ("raw", "pgqueuer")]
        rows.append([str(workers)] + [f"{rate[s]:,.0f} ({cpu[s]:.0f})" for s in SIDES]
                    + [f"{ratio:.2f}" for ratio in ratios])
    _print_table(["workers", "authledger", "per send", "raw loop", "pgqueuer",
                  "÷ raw", "÷ pgqueuer", "per send ÷ raw", "per send ÷ pgqueuer"], rows)
    if args.profile:
        _profile(server, messages)
        _fresh_read_cost(server, messages)


if __name__ == "__main__":
    main()
