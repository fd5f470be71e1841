"""Sealing and verifying the hash chain, beside raw SHA-256 over the same canonical bytes (issue 7).

    .venv/bin/python bench/seal.py [--events 1000000] [--batch-size 5000] [--quick]

Starts its own embedded PostgreSQL in a temporary directory (server defaults:
fsync and synchronous_commit stay on), creates a fresh database from
schema.sql and fills ``events`` with COPY: email streams of three events
(EmailQueued, LeaseClaimed, ProviderAccepted shapes), 10,000 rows per
transaction so that the log spans many transaction ids as a real one does.

Then, in one run and on the application role:

- seal: ``infra.audit.seal.seal``, every event from an empty chain (read by the
  horizon, canonical encoding, two SHA-256 per event, INSERT of the seals);
- verify: ``infra.audit.verify.verify``, the whole chain recomputed from the events
  and compared with the stored seals in one REPEATABLE READ snapshot;
- the baselines, over exactly the same events: reading them (untimed for the
  others), encoding them canonically, and the raw chain of SHA-256 over the
  already-encoded bytes, which is the floor any Python sealer pays.

``--quick`` is a CI-size run of 20,000 events.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from uuid import uuid4

import psycopg
from sqlalchemy import Engine

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from infra.audit import verify as audit, seal as sealer  # noqa: E402 - after the path set-up, for a plain `python bench/seal.py`
from infra.db.engine import Database  # noqa: E402
from bench.bench_server import start_bench_server  # noqa: E402
from projections.audit_chain import GENESIS, LEAF_PREFIX, LINK_PREFIX  # noqa: E402

DATABASE = "authledger_bench_seal"
ROWS_PER_TRANSACTION = 10_000
COPY = "COPY events (stream_id, stream_version, event_id, event_type, schema_version, payload, metadata) FROM STDIN"


def _payloads(message_id: str, n: int) -> list[tuple[str, str]]:
    lease = str(uuid4())
    return [
        ("EmailQueued", json.dumps({
            "message_id": message_id, "flow": "reset", "template": "reset_link", "user_id": f"user-{n % 50_000}",
            "request_id": str(uuid4()), "recipient": f"user{n % 50_000}@example.com",
            "available_at": "2025-01-02T03:04:05.678901+00:00"})),
        ("LeaseClaimed", json.dumps({
            "message_id": message_id, "lease_owner": "worker-7", "lease_token": lease,
            "claimed_at": "2025-01-02T03:04:06.000000+00:00", "lease_expires_at": "2025-01-02T03:04:51.000000+00:00",
            "attempt": 1})),
        ("ProviderAccepted", json.dumps({
            "message_id": message_id, "lease_token": lease, "attempt": 1, "provider": "smtp",
            "provider_message_id": f"<{message_id}@mail.example.com>", "key_id": "k2"})),
    ]


def generate(conninfo: str, events: int) -> float:
    """COPY ``events`` rows into the log; returns seconds taken."""
    metadata = json.dumps({"actor": "bench", "client": "bench", "correlation_id": str(uuid4())})
    started = time.perf_counter()
    written, n = 0, 0
    with psycopg.connect(conninfo, autocommit=True) as connection:
        while written < events:
            with connection.transaction(), connection.cursor().copy(COPY) as copy:
                batch_end = min(events, written + ROWS_PER_TRANSACTION)
                while written < batch_end:
                    message_id = str(uuid4())
                    for version, (event_type, payload) in enumerate(_payloads(message_id, n), start=1):
                        if written == batch_end:
                            break
                        copy.write_row((f"email:{message_id}", version, uuid4(), event_type, 1, payload, metadata))
                        written += 1
                    n += 1
        connection.execute("VACUUM ANALYZE events")
    return time.perf_counter() - started


class Clock:
    """Wall time, and this process's CPU time: on a busy machine the second still says what Python cost."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def lap(self) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        elapsed = (wall - self.wall, cpu - self.cpu)
        self.wall, self.cpu = wall, cpu
        return elapsed


def baselines(engine: Engine) -> tuple[dict[str, list[float]], bytes]:
    """[wall, cpu] seconds to read the same events, to encode them, and to chain raw SHA-256 over the bytes.

    Returns the timings and the chain head, which must equal the sealer's.
    """
    timings = {"read": [0.0, 0.0], "encode": [0.0, 0.0], "sha256": [0.0, 0.0]}
    sha256 = hashlib.sha256
    link = GENESIS
    with sealer.snapshot(engine) as connection, connection.begin():
        stretch = sealer.chain_range(connection)
        assert stretch is not None
        events = sealer.events_in(connection, stretch)
        while True:
            clock = Clock()
            chunk = [event for _, event in zip(range(sealer.BATCH), events, strict=False)]
            _add(timings["read"], clock.lap())
            canonical = [event.canonical() for event in chunk]
            _add(timings["encode"], clock.lap())
            for data in canonical:
                link = sha256(LINK_PREFIX + link + sha256(LEAF_PREFIX + data).digest()).digest()
            _add(timings["sha256"], clock.lap())
            if len(chunk) < sealer.BATCH:
                break
    return timings, link


def _add(total: list[float], lap: tuple[float, float]) -> None:
    total[0] += lap[0]
    total[1] += lap[1]


def _code_version() -> str:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "schema.sql", "infra/audit/seal.py",
         "infra/audit/verify.py", "projections/audit_chain.py"], capture_output=True, text=True).stdout.strip()
    return f"{head.stdout.strip() or 'unknown'}{' + uncommitted changes' if dirty else ''}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=sealer.BATCH)
    parser.add_argument("--quick", action="store_true", help="a CI-size run: 20,000 events")
    args = parser.parse_args()
    events = 20_000 if args.quick else args.events

    server = start_bench_server("authledger-bench-seal-")
    bench_url = server.create_database(DATABASE)

    conninfo = psycopg.conninfo.make_conninfo(server.uri, dbname=DATABASE)
    print(f"authledger {_code_version()}; Python {platform.python_version()}; {os.cpu_count()} CPUs; "
          f"{server.describe()}")
    print(f"generating {events:,} events with COPY ...", flush=True)
    print(f"  {generate(conninfo, events):.1f} s")

    engine = Database(bench_url).engine()
    clock = Clock()
    result = sealer.seal(engine, batch_size=args.batch_size)
    seal_s = clock.lap()
    assert result.sealed == events and result.head is not None

    report = audit.verify(engine)
    verify_s = clock.lap()
    assert report.ok, report.summary()

    base, head = baselines(engine)
    assert head == result.head.link, "the baseline chain must end where the sealer's does"
    engine.dispose()

    raw = events / base["sha256"][0]
    raw_cpu = events / base["sha256"][1]
    encode_and_hash = [base["encode"][k] + base["sha256"][k] for k in (0, 1)]
    rows = [
        ("raw SHA-256 chain over the canonical bytes (Python hashlib)", base["sha256"]),
        ("canonical JSON encoding alone", base["encode"]),
        ("reading the events in horizon order (rows -> LoggedEvent)", base["read"]),
        ("encode + SHA-256 (the sealer's work without the database)", encode_and_hash),
        (f"audit seal (batches of {args.batch_size:,}, one transaction each)", seal_s),
        ("audit verify (events and seals, one snapshot)", verify_s),
    ]
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"\n{events:,} events, sealed into chain index 0-{result.head.chain_index:,} "
          f"(load average at the end: {load})\n")
    width = max(len(name) for name, _ in rows)
    print(f"{'':{width}}  {'wall s':>7}  {'events/s':>9}  {'x raw':>6}  {'Python CPU s':>12}  {'x raw':>6}")
    for name, (wall, cpu) in rows:
        print(f"{name:{width}}  {wall:7.2f}  {events / wall:9,.0f}  {raw * wall / events:6.1f}  "
              f"{cpu:12.2f}  {raw_cpu * cpu / events:6.1f}")
    print("\nx raw: time over the raw SHA-256 chain's. Python CPU s: this process only; the server's work and any "
          "wait for a busy CPU show in wall time alone.")

if __name__ == "__main__":
    main()
