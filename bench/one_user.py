"""Concurrent creates for one user: how long they take, and that none is a conflict (issue 13).

    .venv/bin/python bench/one_user.py [--concurrent 16] [--refusals 2000] [--rounds 3]

Starts its own embedded PostgreSQL (the server's default durability) and,
for each flow (reset, OTP) and each kind of user, releases ``--concurrent``
creates with different idempotency keys for that one user at once, from as
many real threads calling the service functions (the HTTP API's handlers
call the same functions from its thread pool):

- a fresh user, whose stream is empty;
- a user with a long history: the hourly limit's 5 requests, then
  ``--refusals`` refusals appended directly (what as many refused creates
  leave in the log; appending them through the service would only take
  longer).

It reports the wall time of the burst, each create's latency (median and
maximum), and the answers: accepted, rate-limited, and conflicts (a
``ConcurrencyConflict`` reaching the caller, the HTTP API's 409 before this
issue). Figures are medians over ``--rounds``, each round on new users.
The policies are the defaults (5 per hour) without the cooldown, so that
every create the limit lets through issues a new request: a fresh user's
burst is 5 accepted and the rest refused.
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import uuid4

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_server import start_bench_server  # noqa: E402 - after the path set-up
from domain.errors import ConcurrencyConflict  # noqa: E402
from domain.policy import OtpPolicy, ResetPolicy  # noqa: E402
from domain.otp import OtpRequestRefused, RequestOtp, otp_stream  # noqa: E402
from domain.reset import RequestReset, ResetRequestRefused, reset_stream  # noqa: E402
from domain.tokens import TokenKeys  # noqa: E402
from infra.db.engine import Database  # noqa: E402
from infra.errors import RateLimited  # noqa: E402
from infra.eventlog.postgres import PostgresEventStore  # noqa: E402
from infra.services.otp import request_otp  # noqa: E402
from infra.services.reset import request_reset  # noqa: E402
from infra.services.unit_of_work import ServiceContext, append_and_fold  # noqa: E402

# Personal fields are sealed under a master key from the environment: a throwaway one.
os.environ.setdefault("AUTHLEDGER_MASTER_KEY", "bench:" + base64.urlsafe_b64encode(b"b" * 32).decode().rstrip("="))
KEYS = TokenKeys("bench", {"bench": b"bench-one-user-key-0123456789abc"})
HOURLY_LIMIT = 5  # both flows' default
FLOWS = {
    "reset": (request_reset, reset_stream, ResetRequestRefused,
              lambda user, key: RequestReset(user, "user@example.com", idempotency_key=key, client="bench")),
    "otp": (request_otp, otp_stream, OtpRequestRefused,
            lambda user, key: RequestOtp(user, "user@example.com", idempotency_key=key, client="bench")),
}


def burst(ctx: ServiceContext, flow: str, user: str, concurrent: int) -> tuple[float, list[float], Counter[str]]:
    """``concurrent`` creates for ``user`` released at once: wall time, latencies, answers."""
    request, _, _, command = FLOWS[flow]
    barrier = threading.Barrier(concurrent + 1)
    latencies: list[float] = []
    answers: Counter[str] = Counter()

    def one() -> None:
        cmd = command(user, uuid4().hex)
        barrier.wait()
        started = time.perf_counter()
        try:
            request(ctx, cmd, {"actor": "bench"})
            answers["accepted"] += 1
        except RateLimited:
            answers["rate-limited"] += 1
        except ConcurrencyConflict:
            answers["conflict"] += 1
        latencies.append(time.perf_counter() - started)

    threads = [threading.Thread(target=one) for _ in range(concurrent)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, latencies, answers


def with_history(ctx: ServiceContext, flow: str, user: str, refusals: int) -> None:
    """The hourly limit's requests through the service, then ``refusals`` refusal events appended."""
    request, stream_of, refused, command = FLOWS[flow]
    for _ in range(HOURLY_LIMIT):
        request(ctx, command(user, uuid4().hex), {"actor": "bench"})
    now = datetime.now(UTC)
    for start in range(0, refusals, 500):
        events = [refused(user, "rate_limited", now, now + timedelta(hours=1))
                  for _ in range(min(500, refusals - start))]
        with ctx.engine.begin() as connection:
            version = PostgresEventStore(connection).stream_version(stream_of(user))
            append_and_fold(connection, [(stream_of(user), version, events)], {"actor": "bench"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrent", type=int, default=16, help="creates released at once (default 16)")
    parser.add_argument("--refusals", type=int, default=2000, help="refusals in the long history (default 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each on new users (default 3)")
    args = parser.parse_args()
    server = start_bench_server("authledger-bench-one-user-")
    database = Database(server.create_database("bench_one_user"))
    engine = database.engine(pool_size=args.concurrent + 2)
    no_cooldown = {"cooldown": timedelta(0), "hourly_limit": HOURLY_LIMIT}
    ctx = ServiceContext(engine=engine, keys=KEYS, reset_policy=ResetPolicy(**no_cooldown),
                         otp_policy=OtpPolicy(**no_cooldown))
    print(server.describe())
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} at start; {args.concurrent} creates "
          f"at once, different keys, one user; {args.rounds} rounds, medians\n")
    print("| flow | user | burst wall (s) | latency p50 (ms) | latency max (ms) | accepted | 429 | conflicts |")
    print("|---|---|---|---|---|---|---|---|")
    for flow in FLOWS:
        for kind in ("fresh", f"{args.refusals} refusals"):
            rounds = []
            for _ in range(args.rounds):
                user = f"{flow}-{uuid4().hex[:8]}"
                if kind != "fresh":
                    with_history(ctx, flow, user, args.refusals)
                rounds.append(burst(ctx, flow, user, args.concurrent))
            wall = statistics.median(r[0] for r in rounds)
            p50 = statistics.median(statistics.median(r[1]) for r in rounds) * 1000
            worst = statistics.median(max(r[1]) for r in rounds) * 1000
            answers = sum((r[2] for r in rounds), Counter())
            print(f"| {flow} | {kind} | {wall:.2f} | {p50:.0f} | {worst:.0f} | {answers['accepted']} "
                  f"| {answers['rate-limited']} | {answers['conflict']} |")
    engine.dispose()


if __name__ == "__main__":
    main()
