"""HTTP API throughput and latency beside /healthz on the same server, in the same run (issues 5 and 13).

    PYTHONPATH=$PWD .venv/bin/python bench/api.py [--requests 2000] [--clients 16] [--rounds 3] [--processes N]
                                                  [--quick] [--statements]

Starts its own embedded PostgreSQL in a temporary directory with the
server's default durability (the output lists the settings), initialises a
database, registers an API client, then starts the real thing: `authledger
serve --inflight 0 --processes N` (delivery off, so that workers do not
compete for the two cores with the API being measured) with JSON logs, one
line per request, written to a file.

The load generator is one asyncio (uvloop) process speaking plain HTTP/1.1
over ``--clients`` keep-alive connections, a request at a time on each: a
few dozen lines over asyncio streams rather than httpx, whose own CPU per
request was as large as the server's. Its CPU time over each measurement is
reported beside the wall time (its share of one core), so that a reader can
see whether it was the bottleneck; so are the server's processes' and the
whole machine's CPU, and the server's CPU milliseconds a request: a core's
second over that is one API process's ceiling. Beside it, the database
server's CPU milliseconds a request (the postmaster and its backends): the
machine's cores over that bound the rate even if the API cost nothing.

Each round measures, in turn, with ``--clients`` requests in flight:

- ``GET /healthz``: routing, middleware and the event loop, no database:
  the framework's ceiling on this machine;
- ``POST /v1/otp/challenges``: a new user and a new Idempotency-Key each, so
  every request authenticates its key, takes the key's advisory lock, loads
  an empty stream, appends the challenge and its email and folds the inline
  projections, in one transaction;
- ``POST /v1/otp/challenges/{id}/verify`` with the right code, once per
  challenge just created;
- ``POST /v1/password-resets`` (new user and key each), then
  ``POST /v1/password-resets/consume`` with each request's token.

With ``--statements`` the database server loads pg_stat_statements (which
costs it some CPU of its own: compare runs with it only to runs with it),
and after the rounds the run prints the statements that took the server
the most time: calls, how many times each was planned, and the time spent
planning and running it. That is where a statement planned on every
execution shows (bench/history/issue-13-2026-12-02.md).

The rounds alternate the order of healthz against the rest. Before the
rounds, a single-client pass (``--single`` requests per endpoint, one in
flight) gives latency without queueing. Figures are medians over rounds;
each ratio to /healthz is the median of the per-round ratios. Latency is
measured by the client from send to full response. The run fails if any
answer is not the expected status.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import base64
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import NamedTuple
from uuid import uuid4

import httpx
import psycopg
import uvloop
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from bench.bench_server import start_bench_server
from domain.otp import otp_code_for
from domain.otp_events import otp_stream
from domain.otp_state import fold_otp
from domain.reset import reset_token_for
from domain.reset_events import reset_stream
from domain.reset_state import fold_reset
from domain.tokens import TokenKeys
from infra.eventlog.postgres import PostgresEventStore
from infra.config.settings import default_api_processes
from infra.services.clients import create_client
from infra.services.unit_of_work import ServiceContext
from infra.db.schema import init_schema

ROOT = Path(__file__).resolve().parent.parent
AUTHLEDGER = str(Path(sys.executable).parent / "authledger")
DATABASE = "bench_api"
KEY = b"bench-api-key-0123456789abcdef-01"
TOKEN_KEYS = "bench:" + base64.urlsafe_b64encode(KEY).decode().rstrip("=")
SETTINGS = ["fsync", "synchronous_commit", "shared_buffers", "max_connections"]


def _url(uri: str, database: str, driver: str = "postgresql") -> str:
    return make_url(uri).set(drivername=driver, database=database).render_as_string(hide_password=False)


def _prepare(uri: str) -> tuple[str, dict[str, str]]:
    """The bench database, initialised, and an API key for it; and the server's settings."""
    with psycopg.connect(_url(uri, "postgres"), autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {DATABASE}")
        settings = {"server_version": connection.execute("SHOW server_version").fetchone()[0]}
        settings |= {name: connection.execute(f"SHOW {name}").fetchone()[0] for name in SETTINGS}
    admin = create_engine(_url(uri, DATABASE, "postgresql+psycopg"))
    init_schema(admin)
    admin.dispose()
    app_engine = create_engine(_url(uri, DATABASE, "postgresql+psycopg"),
                               connect_args={"options": "-c role=authledger_app"})
    api_key = create_client(ServiceContext(engine=app_engine, keys=TokenKeys("bench", {"bench": KEY})), "bench").api_key
    app_engine.dispose()
    return api_key, settings


# Read in the maintenance database, where start_bench_server(statements=True) creates the view.
STATEMENTS = """
    SELECT calls, plans, total_plan_time, total_exec_time, regexp_replace(query, '\\s+', ' ', 'g') AS query
      FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = %s)
     ORDER BY total_plan_time + total_exec_time DESC LIMIT %s
"""


def _print_statements(uri: str, limit: int = 15) -> None:
    print(f"\nThe {limit} statements that took the server the most time (pg_stat_statements):\n")
    print("| calls | plans | planning ms | running ms | statement |\n|---:|---:|---:|---:|---|")
    with psycopg.connect(uri) as connection:
        for calls, plans, planning, running, query in connection.execute(STATEMENTS, (DATABASE, limit)):
            print(f"| {calls:,} | {plans:,} | {planning:,.0f} | {running:,.0f} | `{query[:90]}` |")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


MASTER_KEY = "bench:" + base64.urlsafe_b64encode(b"b" * 32).decode().rstrip("=")  # a throwaway one


# This bench measures a request's path, not the limits in front of it (bench/fairness.py measures those):
# one tenant's one key sends 16 at once, to a few thousand addresses, round after round.
LIMITS_OUT_OF_REACH = {"AUTHLEDGER_KEY_RATE": "100000", "AUTHLEDGER_KEY_BURST": "100000",
                       "AUTHLEDGER_TENANT_RATE": "100000", "AUTHLEDGER_TENANT_BURST": "100000",
                       "AUTHLEDGER_TENANT_IN_FLIGHT": "64", "AUTHLEDGER_LIMIT_PER_ADDRESS": "100"}


def _start_server(database_url: str, data_dir: Path, processes: int,
                  settings: Mapping[str, str] = LIMITS_OUT_OF_REACH) -> tuple[subprocess.Popen[bytes], int]:
    """``serve`` on a free port with ``settings`` on top of the bench's, once it answers ``/readyz``."""
    port = _free_port()
    env = {**os.environ, "DATABASE_URL": database_url, "AUTHLEDGER_TOKEN_KEYS": TOKEN_KEYS,
           "AUTHLEDGER_DATA_DIR": str(data_dir), "AUTHLEDGER_MAILDIR": str(data_dir / "maildir"),
           "AUTHLEDGER_LOG_FORMAT": "json", "AUTHLEDGER_OTP_HOURLY_LIMIT": "1000",
           "AUTHLEDGER_MASTER_KEY": os.environ.get("AUTHLEDGER_MASTER_KEY", MASTER_KEY), **settings}
    with (data_dir / "serve.log").open("wb") as log:
        process = subprocess.Popen([AUTHLEDGER, "serve", "--port", str(port), "--inflight", "0",
                                    "--processes", str(processes)],
                                   env=env, stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"authledger serve exited with {process.returncode}; see {data_dir / 'serve.log'}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return process, port
        except httpx.TransportError:
            time.sleep(0.1)
    sys.exit("authledger serve did not become ready within 60 s")


def _tree_cpu_seconds(pid: int) -> float:
    """User and system CPU of a process, its live descendants and those it has reaped (Linux /proc).

    The reaped count: PostgreSQL's autovacuum workers come and go within a measurement.
    """
    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            counted = fields[11:15] if current == pid else fields[11:13]  # utime, stime (cutime, cstime)
            total += sum(int(ticks) for ticks in counted) / os.sysconf("SC_CLK_TCK")
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    total = sum(values[:8]) / os.sysconf("SC_CLK_TCK")
    return total - idle / os.sysconf("SC_CLK_TCK"), total


class Connection:
    """One keep-alive HTTP/1.1 connection, one request at a time: just enough client for this bench."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, headers: str) -> None:
        self.reader, self.writer, self.headers = reader, writer, headers

    @classmethod
    async def open(cls, port: int, api_key: str) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer, f"Host: 127.0.0.1:{port}\r\nAuthorization: Bearer {api_key}\r\n")

    async def request(self, method: str, path: str, body: dict | None = None,
                      headers: str = "") -> tuple[int, bytes]:
        payload = json.dumps(body).encode() if body is not None else b""
        extra = f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n" if body is not None else ""
        self.writer.write(f"{method} {path} HTTP/1.1\r\n{self.headers}{headers}{extra}\r\n".encode() + payload)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        found = CONTENT_LENGTH.search(head)
        if found is None:
            raise SystemExit(f"no Content-Length in {head!r}")
        return status, await self.reader.readexactly(int(found.group(1)))

    def close(self) -> None:
        self.writer.close()


CONTENT_LENGTH = re.compile(rb"(?i)\r\ncontent-length: *(\d+)")
Call = Callable[[Connection, int], Awaitable[tuple[int, bytes]]]


class Measured(NamedTuple):
    rate: float  # requests/s
    latencies: list[float]  # seconds, each request
    client_cpu: float  # the load generator's CPU seconds ÷ wall seconds (its share of one core)
    server_cpu: float  # the server processes' CPU seconds ÷ wall seconds (cores)
    database_cpu: float  # the database server's CPU seconds ÷ wall seconds (cores)
    machine_busy: float  # the whole machine's busy share (0-1, all cores)

    @property
    def server_ms(self) -> float:
        """The server's CPU milliseconds a request: one process's ceiling is a core's second over this."""
        return self.server_cpu / self.rate * 1000

    @property
    def database_ms(self) -> float:
        """The database server's CPU milliseconds a request: the cores' seconds over this bound the rate."""
        return self.database_cpu / self.rate * 1000


class Watched(NamedTuple):
    """The processes whose CPU a measurement reads: ``authledger serve`` and the PostgreSQL postmaster."""

    server: int
    database: int


async def _measure(connections: list[Connection], call: Call, count: int, expected: int,
                   watched: Watched) -> Measured:
    """Requests/s over ``count`` calls with one request in flight per connection, and each call's latency."""
    latencies: list[float] = []
    next_index = 0

    async def one_client(connection: Connection) -> None:
        nonlocal next_index
        while next_index < count:
            index, next_index = next_index, next_index + 1
            started = time.perf_counter()
            status, body = await call(connection, index)
            latencies.append(time.perf_counter() - started)
            if status != expected:
                raise SystemExit(f"expected {expected}, got {status}: {body[:300]!r}")

    cpu, (busy, total) = time.process_time(), _machine_busy()
    server, database = _tree_cpu_seconds(watched.server), _tree_cpu_seconds(watched.database)
    started = time.perf_counter()
    await asyncio.gather(*(one_client(c) for c in connections))
    wall = time.perf_counter() - started
    busy_after, total_after = _machine_busy()
    return Measured(count / wall, latencies, (time.process_time() - cpu) / wall,
                    (_tree_cpu_seconds(watched.server) - server) / wall,
                    (_tree_cpu_seconds(watched.database) - database) / wall,
                    (busy_after - busy) / max(total_after - total, 1e-9))


def _secrets(database_url: str, users: list[str], flow: str) -> list[str]:
    """Each user's code (otp) or link token (reset), derived from the key and its sealed nonce, read from the log.

    Read before the verify or consume calls are timed: key and id alone no longer yield a secret.
    """
    engine = create_engine(_url(database_url, DATABASE, "postgresql+psycopg"))
    keys, found = TokenKeys("bench", {"bench": KEY}), {}
    streams = [otp_stream(u) if flow == "otp" else reset_stream(u) for u in users]
    with engine.connect() as connection:
        for stream, history in PostgresEventStore(connection).load_many(dict.fromkeys(streams, 0)).items():
            events = (r.event for r in history)
            if flow == "otp":
                challenge = next(iter(fold_otp(events).challenges.values()))
                found[stream] = (str(challenge.challenge_id), otp_code_for(challenge, keys))
            else:
                found[stream] = reset_token_for(next(iter(fold_reset(events).requests.values())), keys)
    engine.dispose()
    return [found[stream] for stream in streams]


async def _round(port: int, api_key: str, count: int, clients: int, order: list[str], database_url: str,
                 watched: Watched) -> dict[str, Measured]:
    run_id = uuid4().hex[:8]
    users = {"otp": [f"o-{run_id}-{i}" for i in range(count)], "reset": [f"r-{run_id}-{i}" for i in range(count)]}
    secrets: dict[str, list] = {}

    async def healthz(c: Connection, index: int) -> tuple[int, bytes]:
        return await c.request("GET", "/healthz")

    async def challenge(c: Connection, index: int) -> tuple[int, bytes]:
        return await c.request("POST", "/v1/otp/challenges", {"user_id": users["otp"][index],
                                                              "email": f"user{index}@example.com"},
                               f"Idempotency-Key: {uuid4().hex}\r\n")

    async def verify(c: Connection, index: int) -> tuple[int, bytes]:
        challenge_id, code = secrets["otp"][index]
        return await c.request("POST", f"/v1/otp/challenges/{challenge_id}/verify",
                               {"code": code, "user_id": users["otp"][index]})

    async def reset(c: Connection, index: int) -> tuple[int, bytes]:
        return await c.request("POST", "/v1/password-resets", {"user_id": users["reset"][index],
                                                              "email": f"user{index}@example.com"},
                               f"Idempotency-Key: {uuid4().hex}\r\n")

    async def consume(c: Connection, index: int) -> tuple[int, bytes]:
        return await c.request("POST", "/v1/password-resets/consume", {"token": secrets["reset"][index]})

    calls: dict[str, tuple[Call, int]] = {"healthz": (healthz, 200), "otp": (challenge, 202), "verify": (verify, 200),
                                         "reset": (reset, 202), "consume": (consume, 200)}
    connections = [await Connection.open(port, api_key) for _ in range(clients)]
    results = {}
    try:
        await _measure(connections, healthz, clients * 4, 200, watched)  # every connection used once first
        for name in order:
            if name in ("verify", "consume"):
                flow = "otp" if name == "verify" else "reset"
                secrets[flow] = _secrets(database_url, users[flow], flow)
            call, expected = calls[name]
            results[name] = await _measure(connections, call, count, expected, watched)
    finally:
        for connection in connections:
            connection.close()
    return results


def _ms(latencies: list[float], quantile: int) -> float:
    return statistics.quantiles(latencies, n=100, method="inclusive")[quantile - 1] * 1000


LABELS = {"healthz": "GET /healthz", "otp": "POST /v1/otp/challenges",
          "verify": "POST /v1/otp/challenges/{id}/verify", "reset": "POST /v1/password-resets",
          "consume": "POST /v1/password-resets/consume"}
ENDPOINTS = ["otp", "verify", "reset", "consume"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per endpoint per round (default 2000)")
    parser.add_argument("--clients", type=int, default=16, help="requests in flight (default 16)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, alternating the order (default 3)")
    parser.add_argument("--single", type=int, default=300, help="requests per endpoint, one in flight (default 300)")
    parser.add_argument("--processes", type=int, default=default_api_processes(),
                        help="`serve --processes` (default: serve's own, one for each core, at most 4)")
    parser.add_argument("--quick", action="store_true", help="200 requests, 1 round: a smoke test for CI")
    parser.add_argument("--statements", action="store_true",
                        help="load pg_stat_statements; print where the database server's time went")
    args = parser.parse_args()
    count, rounds, single = (200, 1, 50) if args.quick else (args.requests, args.rounds, args.single)

    data_dir = Path(tempfile.mkdtemp(prefix="authledger-bench-api-"))
    atexit.register(shutil.rmtree, data_dir, ignore_errors=True)  # after the embedded server's exit hook
    uri = start_bench_server("authledger-bench-api-", data_dir=data_dir / "pg", statements=args.statements).uri
    api_key, settings = _prepare(uri)
    if args.statements:
        with psycopg.connect(uri, autocommit=True) as connection:
            connection.execute("SELECT pg_stat_statements_reset()")  # from here: the server's statements only
    # The bench reads each request's sealed nonce as the server does: under the same master key.
    os.environ.setdefault("AUTHLEDGER_MASTER_KEY", MASTER_KEY)
    server, port = _start_server(_url(uri, DATABASE), data_dir, args.processes)
    # The postmaster's pid heads its pid file; its backends are its children.
    watched = Watched(server.pid, int((data_dir / "pg" / "pgdata" / "postmaster.pid").read_text().split()[0]))
    loads = [os.getloadavg()[0]]
    try:
        print(f"PostgreSQL {settings.pop('server_version')} (embedded, unix socket, data in {data_dir})")
        print("durability: " + ", ".join(f"{name}={value}" for name, value in settings.items()))
        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {loads[0]:.2f} at start, "
              f"Python {platform.python_version()}")
        print(f"server: authledger serve --inflight 0 --processes {args.processes} on port {port}")
        print(f"{count} requests per endpoint per round, {args.clients} in flight, {rounds} rounds; "
              f"single client: {single} per endpoint\n")
        uvloop.install()
        database_url = _url(uri, DATABASE)
        alone = asyncio.run(_round(port, api_key, single, 1, ["healthz", *ENDPOINTS], database_url, watched))
        for name, result in alone.items():
            print(f"  single client: {name:<8} p50 {_ms(result.latencies, 50):6.2f} ms, "
                  f"p99 {_ms(result.latencies, 99):6.2f} ms, server CPU {result.server_ms:.2f} ms a request, "
                  f"database {result.database_ms:.2f}",
                  flush=True)
        samples: dict[str, list[Measured]] = {name: [] for name in ["healthz", *ENDPOINTS]}
        for round_ in range(rounds):
            order = ["healthz", *ENDPOINTS] if round_ % 2 == 0 else [*ENDPOINTS, "healthz"]
            for name, result in asyncio.run(_round(port, api_key, count, args.clients, order, database_url,
                                                   watched)).items():
                samples[name].append(result)
                print(f"  round {round_ + 1}: {name:<8} {result.rate:>8,.0f} req/s, p99 "
                      f"{_ms(result.latencies, 99):6.1f} ms, load generator {result.client_cpu:.0%} of a core, "
                      f"server {result.server_cpu:.2f} cores ({result.server_ms:.2f} ms a request), "
                      f"database {result.database_cpu:.2f} cores ({result.database_ms:.2f} ms), "
                      f"machine {result.machine_busy:.0%} busy", flush=True)
            loads.append(os.getloadavg()[0])
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=30)
    if code != 0:
        sys.exit(f"authledger serve exited with {code} on SIGTERM")

    print(f"\nload average (1 min) at the start and after each round: {', '.join(f'{x:.2f}' for x in loads)}")
    print(f"\n| endpoint | single client p50 ms | req/s ({args.clients} in flight) | p50 ms | p99 ms | "
          "req/s ÷ /healthz | load generator, share of a core | server, cores | server CPU ms a request | "
          "database CPU ms a request | machine busy |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, runs in samples.items():
        rate = statistics.median(r.rate for r in runs)
        ratio = statistics.median(r.rate / h.rate for r, h in zip(runs, samples["healthz"], strict=True))
        p50 = statistics.median(_ms(r.latencies, 50) for r in runs)
        p99 = statistics.median(_ms(r.latencies, 99) for r in runs)
        client = statistics.median(r.client_cpu for r in runs)
        served = statistics.median(r.server_cpu for r in runs)
        busy = statistics.median(r.machine_busy for r in runs)
        cpu_ms = statistics.median(r.server_ms for r in runs)
        database_ms = statistics.median(r.database_ms for r in runs)
        print(f"| {LABELS[name]} | {_ms(alone[name].latencies, 50):.2f} | {rate:,.0f} | {p50:.1f} | {p99:.1f} | "
              f"{ratio:.2f} | {client:.0%} | {served:.2f} | {cpu_ms:.2f} | {database_ms:.2f} | {busy:.0%} |")
    if args.statements:
        _print_statements(uri)


if __name__ == "__main__":
    main()
