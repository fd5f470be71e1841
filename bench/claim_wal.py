"""WAL written per worker claim and per release on the kept small and large logs of bench/log_size.py.

    .venv/bin/python bench/claim_wal.py --data-dir /tmp/ls-big/server [--warm 40] [--rounds 100]

A probe for the claim's residual growth on a 10M-event log: is it WAL (the
full-page images a first touch after a checkpoint writes), or reads?
Each database in turn (not interleaved: the WAL position is the server's),
after its queue is drained and a CHECKPOINT: ``--warm`` rounds of the
log-size bench's own round, then ``--rounds`` measured rounds (a reset and
an OTP request, then a claim of 32 due emails and their release), each
claim and release timed and its WAL measured as the move of
``pg_current_wal_lsn()`` around it. Needs a ``--data-dir`` that
bench/log_size.py built and kept.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import text  # noqa: E402

from bench import log_size  # noqa: E402 - sets the bench master key, as log_size's own run does
from bench.bench_server import start_bench_server  # noqa: E402
from bench.console import BenchMailer  # noqa: E402
from domain.otp import RequestOtp  # noqa: E402
from domain.reset import RequestReset  # noqa: E402
from infra.db.engine import Database  # noqa: E402
from infra.delivery.send import record, released  # noqa: E402
from infra.delivery.worker import Worker  # noqa: E402
from infra.services.otp import request_otp  # noqa: E402
from infra.services.reset import request_reset  # noqa: E402

WAL_POSITION = text("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint")


def probe(url: str, name: str, warm: int, rounds: int) -> dict[str, list[tuple[int, float]]]:
    """(WAL bytes, seconds) of each measured claim and release."""
    admin = Database(url).admin_engine()
    measured: dict[str, list[tuple[int, float]]] = {"claim": [], "release": []}
    with log_size.services(url, False) as (ctx, worker, _), admin.connect() as wal:
        Worker(ctx, BenchMailer(), sender=log_size.SENDER, owner=log_size.OWNER).drain()
        wal.execute(text("CHECKPOINT"))
        wal.commit()
        for n in range(warm):
            log_size.one_round(ctx, worker, f"claim-wal-{name}-{time.time_ns()}-{n}")
        for n in range(rounds):
            user = f"claim-wal-{name}-{time.time_ns()}-{n}"
            request_reset(ctx, RequestReset(user, f"{user}@example.com"))
            request_otp(ctx, RequestOtp(user, f"{user}@example.com"))
            before = wal.execute(WAL_POSITION).scalar_one()
            started = time.perf_counter()
            claims = worker.claim(log_size.OWNER, log_size.CLAIM_BATCH)
            claimed = time.perf_counter()
            middle = wal.execute(WAL_POSITION).scalar_one()
            given_back = [released(ctx, claim, log_size.OWNER, attempt_returned=True) for claim in claims]
            started_release = time.perf_counter()
            record(ctx.engine, given_back, log_size.OWNER)
            done = time.perf_counter()
            after = wal.execute(WAL_POSITION).scalar_one()
            measured["claim"].append((middle - before, claimed - started))
            measured["release"].append((after - middle, done - started_release))
    admin.dispose()
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="a server bench/log_size.py kept")
    parser.add_argument("--warm", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    server = start_bench_server("claim-wal", data_dir=args.data_dir)
    print("| log | operation | WAL bytes p50 | ms p50 |\n|---|---|---:|---:|")
    for name in ("small", "large"):
        for operation, values in probe(server.database_url(f"authledger_bench_{name}"), name, args.warm,
                                       args.rounds).items():
            wal_bytes = statistics.median(v[0] for v in values)
            milliseconds = statistics.median(v[1] for v in values) * 1000
            print(f"| {name} | {operation} | {wal_bytes:,.0f} | {milliseconds:.2f} |", flush=True)


if __name__ == "__main__":
    main()
