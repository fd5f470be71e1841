"""One request's cost in-process: p50 and round trips of each hot path, with and without a catch-up runner beside it.

    PYTHONPATH=$PWD .venv/bin/python bench/hot_path.py [--requests 300]

No HTTP: the service functions the handlers call, one request at a time in
one thread, on a fresh embedded database. Three things, each beside its
baseline in the same run:

- what a round trip costs on this machine: ``SELECT 1`` with this process
  and its backend on the same core, then on different cores (``taskset``);
- each hot path's p50, its CPU per call in this process (``process_time``:
  our code, SQLAlchemy and psycopg; not the server's) and its round trips,
  counted at the wire (libpq's trace: one ReadyForQuery per wait);
- OTP create's p50 alone, then with a catch-up runner in a thread beside it
  that folds after every commit (``gather_seconds=0``), then one that
  gathers a burst for 0.2 s, as ``authledger serve`` runs it.

To compare with an older commit, copy this file (and tests/support/wire.py)
into that commit's checkout and run it there (before ``gather_seconds``
existed, leave out the runner part).
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from uuid import uuid4

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg  # after the path set-up
from sqlalchemy import Engine

from bench.bench_server import start_bench_server
from domain.otp import RequestOtp, otp_code_for
from domain.otp_events import otp_stream
from domain.otp_state import fold_otp
from domain.reset import RequestReset, reset_token_for
from domain.reset_events import reset_stream
from domain.reset_state import fold_reset
from domain.tokens import TokenKeys
from infra.db.engine import Database
from infra.projector.catchup import CatchUpRunner
from infra.services.otp import request_otp, verify_code
from infra.services.reset import consume_token, request_reset, verify_token
from infra.services.unit_of_work import ServiceContext, load_state
from tests.support.wire import at_the_wire

KEYS = TokenKeys("bench", {"bench": b"k" * 32})


def round_trip_us(uri: str, samples: int = 3000) -> tuple[float, float]:
    """p50 of ``SELECT 1`` in microseconds: (same core as the backend, different cores)."""
    with psycopg.connect(uri, autocommit=True) as connection:
        backend = connection.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        found = []
        for backend_cpu in ("0", "1"):
            os.sched_setaffinity(0, {0})
            subprocess.run(["taskset", "-p", "-c", backend_cpu, str(backend)], check=True, capture_output=True)
            took = []
            for _ in range(samples):
                started = time.perf_counter()
                connection.execute("SELECT 1", prepare=True).fetchone()
                took.append(time.perf_counter() - started)
            found.append(statistics.median(took) * 1e6)
        os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
        subprocess.run(["taskset", "-p", "-c", f"0-{(os.cpu_count() or 1) - 1}", str(backend)], check=True,
                       capture_output=True)
    return found[0], found[1]


def round_trips_of(engine: Engine, call: Callable[[], object]) -> int:
    with at_the_wire(engine) as wire:
        call()
    return wire.round_trips


def timed(calls: list[Callable[[], object]]) -> str:
    """The calls' p50 and this process's CPU per call, in ms."""
    took = []
    cpu = time.process_time()
    for call in calls:
        started = time.perf_counter()
        call()
        took.append(time.perf_counter() - started)
    cpu_ms = (time.process_time() - cpu) / len(calls) * 1000
    return f"p50 {statistics.median(took) * 1000:5.2f} ms, CPU {cpu_ms:4.2f} ms per call"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    n = parser.parse_args().requests
    os.environ.setdefault("AUTHLEDGER_MASTER_KEY", "bench:" + base64.urlsafe_b64encode(b"b" * 32).decode().rstrip("="))
    server = start_bench_server("authledger-bench-hot-path-")
    print(server.describe())
    same, apart = round_trip_us(server.uri)
    print(f"SELECT 1 round trip p50: {same:.0f} us with the backend on this core, {apart:.0f} us on the other "
          f"({apart / same:.1f}x)")
    engine = Database(server.create_database("bench_hot_path")).engine(pool_size=4)
    ctx = ServiceContext(engine=engine, keys=KEYS)
    run = uuid4().hex[:8]

    def otp_create(user: str) -> Callable[[], object]:
        return lambda: request_otp(ctx, RequestOtp(user, f"{user}@example.com", idempotency_key=uuid4().hex))

    def reset_create(user: str) -> Callable[[], object]:
        return lambda: request_reset(ctx, RequestReset(user, f"{user}@example.com", idempotency_key=uuid4().hex))

    for i in range(20):  # warm: pools, prepared statements, the proven master key
        otp_create(f"w-{run}-{i}")()
    otps, resets = [f"o-{run}-{i}" for i in range(n + 1)], [f"r-{run}-{i}" for i in range(n + 1)]
    print(f"\n{n} calls each, one at a time, one thread")
    print(f"  otp create     {timed([otp_create(u) for u in otps[1:]])}, "
          f"{round_trips_of(engine, otp_create(otps[0]))} round trips")
    challenges = [next(iter(load_state(ctx, otp_stream(u), fold_otp).challenges.values())) for u in otps]
    verifies = [lambda u=u, c=c: verify_code(ctx, c.challenge_id, otp_code_for(c, KEYS), user_id=u)
                for u, c in zip(otps, challenges, strict=True)]
    print(f"  otp verify     {timed(verifies[1:])}, {round_trips_of(engine, verifies[0])} round trips")
    print(f"  reset create   {timed([reset_create(u) for u in resets[1:]])}, "
          f"{round_trips_of(engine, reset_create(resets[0]))} round trips")
    tokens = [reset_token_for(next(iter(load_state(ctx, reset_stream(u), fold_reset).requests.values())), KEYS)
              for u in resets]
    print(f"  reset verify   {timed([lambda t=t: verify_token(ctx, t) for t in tokens[1:]])}, "
          f"{round_trips_of(engine, lambda: verify_token(ctx, tokens[0]))} round trips")
    print(f"  reset consume  {timed([lambda t=t: consume_token(ctx, t) for t in tokens[1:]])}, "
          f"{round_trips_of(engine, lambda: consume_token(ctx, tokens[0]))} round trips")

    print("\notp create beside the catch-up runner")
    for label, gather in (("no runner", None), ("a pass per commit (gather 0)", 0.0), ("gather 0.2 s", 0.2),
                          ("no runner, again", None)):
        runner = thread = None
        if gather is not None:
            runner = CatchUpRunner(engine, poll_seconds=5, gather_seconds=gather)
            thread = threading.Thread(target=runner.run)
            thread.start()
            time.sleep(1)  # listening, caught up
        took = timed([otp_create(f"c-{uuid4().hex[:8]}-{i}") for i in range(n)])
        if runner is not None and thread is not None:
            runner.stop()
            thread.join()
        print(f"  {label:<30} {took}")
    engine.dispose()


if __name__ == "__main__":
    main()
