"""Where the API's service paths spend their CPU: create, verify and consume, in one thread, under cProfile.

    PYTHONPATH=$PWD .venv/bin/python bench/api_profile.py [--requests 300] [--top 25] [--compile]

Runs the service functions the HTTP handlers call (no HTTP, no threadpool),
one request at a time, on a fresh embedded database: reset create, verify,
consume; OTP create, verify; plus the API-key lookup. Prints, per step, the
wall time per call, the SQL statements each call had the server run and the
round trips it waited for (counted at the wire, tests/support/wire.py, since
the pipelined hot path sends most statements past SQLAlchemy;
``--statements`` lists their command tags), the transactions they ran in, the
functions with the most own CPU time, and (with ``--compile``) how much of
the run SQLAlchemy spent compiling statements.
"""

from __future__ import annotations

import argparse
import base64
import cProfile
import io
import os
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path
from uuid import uuid4

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import Engine  # after the path set-up

from bench.bench_server import start_bench_server  # after the path set-up
from domain.otp import RequestOtp, otp_code_for
from domain.otp_events import otp_stream
from domain.otp_state import fold_otp
from domain.reset import RequestReset, reset_token_for
from domain.reset_events import reset_stream
from domain.reset_state import fold_reset
from domain.tokens import TokenKeys
from infra.db.engine import Database
from infra.services.clients import authenticate, create_client
from infra.services.otp import request_otp, verify_code
from infra.services.reset import consume_token, request_reset, verify_token
from infra.services.unit_of_work import ServiceContext, load_state
from tests.support.wire import at_the_wire

CALLERS = ""
LIST_STATEMENTS = False
KEYS = TokenKeys("bench", {"bench": b"k" * 32})


def profiled(engine: Engine, name: str, calls: list[Callable[[], object]], top: int, compile_only: bool) -> None:
    for call in calls[:20]:  # warm the pools and caches, as a running server has
        call()
    with at_the_wire(engine) as wire:
        calls[20]()  # one call alone, to count its statements
    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    for call in calls[21:]:
        call()
    profile.disable()
    per_call = (time.perf_counter() - started) / max(1, len(calls) - 21) * 1000
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    total = stats.total_tt  # type: ignore[attr-defined]
    compiled = sum(tt for (file, _, func), (_, _, tt, _, _) in stats.stats.items()  # type: ignore[attr-defined]
                   if "sqlalchemy/sql/" in file)
    print(f"== {name}: {per_call:.2f} ms per call under the profiler; own time in sqlalchemy/sql "
          f"(statement building and compiling) {compiled / total:.0%} of {total:.2f} s; "
          f"{len(wire.statements)} statements in {wire.transactions} transaction(s) and "
          f"{wire.round_trips} round trips per call")
    if LIST_STATEMENTS:
        for tag in wire.statements:
            print("   ", tag)
    if CALLERS:
        stats.print_callers(CALLERS)
        print(out.getvalue()[-3000:])
    if not compile_only:
        stats.sort_stats("tottime").print_stats(top)
        print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[-(top + 8) * 200:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--compile", action="store_true", help="only the share of statement building")
    parser.add_argument("--statements", action="store_true", help="list the statements one call sends")
    parser.add_argument("--callers", default="", help="also list the callers of functions matching this")
    args = parser.parse_args()
    global CALLERS, LIST_STATEMENTS
    CALLERS, LIST_STATEMENTS = args.callers, args.statements
    # Personal fields are sealed under a master key from the environment: a throwaway one, as bench/api.py's.
    os.environ.setdefault("AUTHLEDGER_MASTER_KEY", "bench:" + base64.urlsafe_b64encode(b"b" * 32).decode().rstrip("="))
    server = start_bench_server("authledger-bench-api-profile-")
    engine = Database(server.create_database("bench_api_profile")).engine(pool_size=4)
    ctx = ServiceContext(engine=engine, keys=KEYS)
    api_key = create_client(ctx, "bench").api_key
    run, n = uuid4().hex[:8], args.requests + 20
    users = [f"p-{run}-{i}" for i in range(n)]

    profiled(engine, "authenticate", [lambda: authenticate(engine, api_key)] * n, args.top, args.compile)
    profiled(engine, "reset create", [lambda u=u: request_reset(ctx, RequestReset(u, f"{u}@example.com",
                                                                           idempotency_key=uuid4().hex))
                              for u in users], args.top, args.compile)
    tokens = []
    for u in users:
        state = load_state(ctx, reset_stream(u), fold_reset)
        tokens.append(reset_token_for(next(iter(state.requests.values())), KEYS))
    profiled(engine, "reset verify", [lambda t=t: verify_token(ctx, t) for t in tokens], args.top, args.compile)
    profiled(engine, "reset consume", [lambda t=t: consume_token(ctx, t) for t in tokens], args.top, args.compile)
    profiled(engine, "otp create", [lambda u=u: request_otp(ctx, RequestOtp(u, f"{u}@example.com",
                                                                     idempotency_key=uuid4().hex))
                            for u in users], args.top, args.compile)
    pairs = []
    for u in users:
        challenge = next(iter(load_state(ctx, otp_stream(u), fold_otp).challenges.values()))
        pairs.append((u, challenge.challenge_id, otp_code_for(challenge, KEYS)))
    profiled(engine, "otp verify", [lambda p=p: verify_code(ctx, p[1], p[2], user_id=p[0]) for p in pairs],
             args.top, args.compile)
    engine.dispose()


if __name__ == "__main__":
    main()
