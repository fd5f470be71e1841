"""Rebuilding the outbox and token projections, beside a raw scan of the same events (issue 6).

    .venv/bin/python bench/rebuild.py [--events 1000000] [--batch-size 5000] [--quick]

Starts its own embedded PostgreSQL in a temporary directory (server defaults:
fsync and synchronous_commit stay on), creates a fresh database from
schema.sql and fills ``events`` as the service appends (``generate``: about
a hundred events a transaction, so the log spans many transaction ids and
its pages are laid out as a served log's). Payloads are made by encoding
domain events with authledger's own codec, so that they decode, recipients
sealed under per-user data keys that are stored wrapped in ``subject_keys``
as in production (a fixed bench master key): each new user makes one
request, a reset request and an OTP challenge in turn, with an idempotency
key and its address's keyed hash as the service records them; each is a
``ResetRequested`` or ``OtpChallengeIssued`` on its user's stream and an
``EmailQueued``, ``LeaseClaimed`` and ``ProviderAccepted`` on its email's
stream, and a worker trails the requests, its claims and its acceptances
each on a connection of their own (a claim comes 50 requests later, its
acceptance 100), so an email's events are spread over the log as in
production.

Then, each in a fresh process so that its peak memory is its own:

- raw: a server-side cursor over the same events in horizon order, each row
  turned into a dict with its jsonb payload decoded (psycopg's json.loads);
  the floor for any Python reader of the log;
- ``infra.projector.rebuild.rebuild`` of ``email_outbox`` and of ``reset_tokens``:
  shadow tables, the whole log folded page by page, the swap.

Peak memory is ``ru_maxrss`` of that process. To show it does not grow with
the log, the rebuilds run twice: at a quarter of the events, and at all of
them. ``--quick`` is a CI-size run of 40,000 events.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID, uuid4

import psycopg
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from domain.email import EmailQueued, LeaseClaimed, ProviderAccepted  # noqa: E402 - after the path set-up
from domain.otp_events import OTP_CODE, OtpChallengeIssued  # noqa: E402
from domain.reset_events import RESET_LINK, ResetRequested  # noqa: E402
from domain.tokens import TokenKeys  # noqa: E402
from bench.bench_server import start_bench_server  # noqa: E402
from infra.eventlog.personal_data import DataKeyring  # noqa: E402
from infra.eventlog.subject_keys import MASTER_KEY_VARIABLE, MasterKeys  # noqa: E402
from infra.eventlog.codec import default_codec  # noqa: E402
from infra.eventlog.ids import time_ordered_id  # noqa: E402
from infra.services.address_index import address_hmac  # noqa: E402

DATABASE = "authledger_bench_rebuild"
ROWS_PER_TRANSACTION = 100  # fewer commits than one a request; each page still filled as a served log's
CLAIM_LAG, ACCEPT_LAG = 50, 100  # requests between an email's queueing and its claim, and its acceptance
INSERT = ("INSERT INTO events (stream_id, stream_version, event_id, event_type, schema_version, payload, metadata) "
          "VALUES (%s, %s, %s, %s, %s, %s, %s)")
INSERT_KEYS = "INSERT INTO subject_keys (user_id, key_id, master_key_id, wrapped_key) VALUES (%s, %s, %s, %s)"
# The service's token keys in the benches that build on this log (bench/log_size.py): the generated
# requests' key id, and the key their addresses are hashed under, as the service would.
KEYS = TokenKeys("k2", {"k2": b"bench-log-size-key-0123456789abc"})
BENCH_MASTER_KEY = "bench:" + "YmVuY2gtbWFzdGVyLWtleS0zMi1ieXRlcy1sb25nISE"  # 32 bytes, base64url
RAW_SCAN = """
    SELECT global_position, stream_id, stream_version, event_id, event_type, schema_version,
           payload, metadata, recorded_at, transaction_id::text AS transaction_id
      FROM events ORDER BY events.transaction_id, events.global_position
"""


class BenchKeyring(DataKeyring):
    """One data key per user, wrapped by the master key, kept until its row is written to subject_keys."""

    def __init__(self, master: MasterKeys) -> None:
        self.master, self.keys, self.rows = master, {}, []

    def writing_key(self, user_id: str) -> tuple[str, bytes]:
        if user_id not in self.keys:
            key_id, key = time_ordered_id().hex, AESGCM.generate_key(bit_length=256)  # as the service makes them
            self.rows.append((user_id, key_id, *self.master.wrap(user_id, key_id, key)))
            self.keys[user_id] = (key_id, key)
        return self.keys[user_id]

    def written(self) -> list[tuple]:
        rows, self.rows, self.keys = self.rows, [], {}  # every user has one request: done with their key
        return rows


class Log:
    """Events of reset requests, OTP challenges and their emails, in the order a busy service appends them.

    Each step is one new user's request, a reset request and an OTP challenge
    in turn, carrying what the HTTP API's clients send and the service
    records: an idempotency key (so ``receipts`` grows with the log), the
    address's keyed hash (so does ``address_index``).
    """

    def __init__(self) -> None:
        self.codec, self.n, self.pending = default_codec(), 0, {}
        self.keyring = BenchKeyring(MasterKeys.parse(os.environ[MASTER_KEY_VARIABLE]))
        self.start = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)

    def _row(self, stream: str, version: int, event: object) -> tuple:
        tag, schema_version, payload = self.codec.encode_json(event, self.keyring)
        return (stream, version, uuid4(), tag, schema_version, payload)

    def _request(self, n: int, now: datetime) -> tuple[UUID, list[tuple]]:
        """User n's request and its email (and the email's id): a reset request for even n, an OTP challenge
        for odd."""
        request_id, message_id, user = uuid4(), uuid4(), f"user-{n}"
        address = f"{user}@example.com"
        said = {"idempotency_key": uuid4().hex, "client": "web", "address_hmac": address_hmac(KEYS, address)}
        if n % 2 == 0:
            token_hash = hashlib.sha256(request_id.bytes).hexdigest()
            request = self._row(f"reset-user:{user}", 1, ResetRequested(
                request_id, user, address, KEYS.current_id, token_hash, now, now + timedelta(minutes=30),
                message_id, **said))
            flow, template = "reset", RESET_LINK
        else:
            request = self._row(f"otp-user:{user}", 1, OtpChallengeIssued(
                request_id, user, address, KEYS.current_id, 6, "login", now, now + timedelta(minutes=10),
                message_id, **said))
            flow, template = "otp", OTP_CODE
        email = self._row(f"email:{message_id}", 1, EmailQueued(message_id, flow, template, user, request_id,
                                                                address, now))
        return message_id, [request, email]

    def step(self) -> tuple[list[tuple], list[tuple], list[tuple]]:
        """One new request and its email (the API's appends), the claim of an earlier one and the acceptance
        of one earlier still (a worker's)."""
        n, now = self.n, self.start + timedelta(milliseconds=self.n)
        message_id, requested = self._request(n, now)
        self.pending[n] = (message_id, uuid4())
        claims, acceptances = [], []
        if n - CLAIM_LAG in self.pending:
            claimed, lease = self.pending[n - CLAIM_LAG]
            claims.append(self._row(f"email:{claimed}", 2, LeaseClaimed(
                claimed, "worker-7", lease, now, now + timedelta(seconds=45), 1)))
        if n - ACCEPT_LAG in self.pending:
            accepted, lease = self.pending.pop(n - ACCEPT_LAG)
            acceptances.append(self._row(f"email:{accepted}", 3, ProviderAccepted(
                accepted, lease, 1, now, "smtp", f"<{accepted}@mail.example.com>", KEYS.current_id)))
        self.n += 1
        return requested, claims, acceptances


def generate(conninfo: str, log: Log, events: int) -> float:
    """Append until the log holds ``events`` more rows, as the service appends them; returns seconds taken.

    Three connections take turns, as the API and a worker do: one appends
    the requests and their emails, one the claims, one the acceptances (the
    worker records outcomes through a pool of its own), about a hundred
    events between the three transactions. INSERTs, not COPY, and each on a
    connection of its own, because the room left at the end of the log's
    pages, which PostgreSQL's free space map later offers any insert,
    depends on who appends what: at 2M events, 47,036 pages had room for a
    claim's event with the claims and acceptances on one connection,
    22,294 with everything on one, and 434 so
    (bench/history/issue-13-2026-12-02.md, "Where the room comes from").
    Commits do not wait for the WAL flush: only the layout matters here.
    """
    metadata = json.dumps({"actor": "client:web", "client": "web"})
    started, written = time.perf_counter(), 0
    with psycopg.connect(conninfo) as api, psycopg.connect(conninfo) as claimer, \
            psycopg.connect(conninfo) as recorder:
        for connection in (api, claimer, recorder):
            connection.execute("SET synchronous_commit = off")
        while written < events:
            rows: tuple[list[tuple], list[tuple], list[tuple]] = ([], [], [])
            while (taken := sum(map(len, rows))) < ROWS_PER_TRANSACTION and written + taken < events:
                for appended, made in zip(rows, log.step(), strict=True):
                    appended += [(*row, metadata) for row in made]
            requested, claims, acceptances = rows
            with api.cursor() as cursor:
                cursor.executemany(INSERT, requested)
                cursor.executemany(INSERT_KEYS, log.keyring.written())
            api.commit()
            for connection, appended in ((claimer, claims), (recorder, acceptances)):
                if appended:
                    with connection.cursor() as cursor:
                        cursor.executemany(INSERT, appended)
                    connection.commit()
            written += taken
        api.autocommit = True
        api.execute("VACUUM ANALYZE events")
        api.execute("VACUUM ANALYZE subject_keys")
    return time.perf_counter() - started


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(kind: str, url: str, batch_size: int) -> dict[str, float]:
    """Run one measurement in this (fresh) process."""
    cpu, wall = time.process_time(), time.perf_counter()
    if kind == "raw":
        events = 0
        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://", 1)) as connection, \
                connection.cursor(name="raw_scan") as cursor:
            cursor.itersize = batch_size
            cursor.execute(RAW_SCAN)
            columns = None
            for row in cursor:
                columns = columns or [c.name for c in cursor.description]
                record = dict(zip(columns, row, strict=True))
                events += isinstance(record["payload"], dict)
    else:
        from infra.db.engine import Database
        from infra.projector.registry import projection_named
        from infra.projector.rebuild import rebuild

        admin = Database(url).admin_engine()
        with admin.connect() as connection:
            events = connection.execute(text("SELECT count(*) FROM events")).scalar_one()
        folded = rebuild(admin, projection_named(kind), batch_size=batch_size).events
        admin.dispose()
        assert folded > 0
    return {"events": events, "wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
            "peak_mb": peak_mb()}


def run_measure(kind: str, url: str, batch_size: int) -> dict[str, float]:
    result = subprocess.run([sys.executable, __file__, "--measure", kind, "--url", url,
                             "--batch-size", str(batch_size)], capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"measuring {kind} failed:\n{result.stderr}")
    return json.loads(result.stdout)


def _code_version() -> str:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "infra", "projections"],
                           capture_output=True, text=True).stdout.strip()
    return f"{head.stdout.strip() or 'unknown'}{' + uncommitted changes' if dirty else ''}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=5000)
    parser.add_argument("--quick", action="store_true", help="a CI-size run: 40,000 events")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.url, args.batch_size)))
        return
    events = 40_000 if args.quick else args.events
    os.environ.setdefault(MASTER_KEY_VARIABLE, BENCH_MASTER_KEY)  # the measuring processes inherit it

    server = start_bench_server("authledger-bench-rebuild-")
    bench_url = server.create_database(DATABASE)
    conninfo = psycopg.conninfo.make_conninfo(server.uri, dbname=DATABASE)

    print(f"authledger {_code_version()}; Python {platform.python_version()}; {os.cpu_count()} CPUs; "
          f"{server.describe()}")
    log, rows = Log(), []
    for size in (events // 4, events):
        print(f"generating the log up to {size:,} events ...", flush=True)
        print(f"  {generate(conninfo, log, size - log_size(conninfo)):.1f} s", flush=True)
        for kind in ("raw", "email_outbox", "raw", "reset_tokens"):
            result = run_measure(kind, bench_url, args.batch_size)
            rows.append((size, kind, result))
            print(f"  {kind:<13} {result['wall']:7.2f} s  {result['events'] / result['wall']:9,.0f} events/s  "
                  f"CPU {result['cpu']:6.2f} s  peak {result['peak_mb']:6.1f} MB", flush=True)
    report(rows)


def log_size(conninfo: str) -> int:
    with psycopg.connect(conninfo) as connection:
        return connection.execute("SELECT count(*) FROM events").fetchone()[0]


def report(rows: list[tuple[int, str, dict[str, float]]]) -> None:
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"\n(load average at the end: {load})\n")
    print("| log size | run | wall s | events/s | × raw scan | Python CPU s | peak memory MB |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for size in sorted({size for size, _, _ in rows}):
        runs = [(kind, r) for s, kind, r in rows if s == size]
        raw_rate = sum(r["events"] / r["wall"] for kind, r in runs if kind == "raw") / 2
        for kind, r in runs:
            rate = r["events"] / r["wall"]
            name = "raw scan (server-side cursor, rows → dicts)" if kind == "raw" else f"rebuild {kind}"
            print(f"| {size:,} | {name} | {r['wall']:.2f} | {rate:,.0f} | {rate / raw_rate:.2f} | "
                  f"{r['cpu']:.2f} | {r['peak_mb']:.0f} |")


if __name__ == "__main__":
    main()
