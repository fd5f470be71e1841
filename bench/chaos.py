"""Long-form chaos run: workers SIGKILLed while they deliver, with and without provider idempotency.

    .venv/bin/python bench/chaos.py [--messages 500] [--kill-for 20] [--quick]

Starts its own embedded PostgreSQL, runs tests/support/chaos.py against an
idempotent HTTP provider and against a plain SMTP relay, and prints one table
row per run (markdown, for the journal in bench/history/).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infra.db.engine import Database
from bench.bench_server import start_bench_server
from tests.support.chaos import run_chaos

HEADER = (
    "| provider | messages | kills | restarts | accepted sends | duplicates | lost | max queued→accepted (s) |\n"
    "|---|---|---|---|---|---|---|---|"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--kill-for", type=float, default=20.0, help="seconds of random kills")
    parser.add_argument("--quick", action="store_true", help="100 messages, 3 s of kills")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.kill_for = 100, 3.0

    server = start_bench_server("authledger-chaos-")
    print(HEADER)
    for n, provider in enumerate(["http", "smtp"]):
        url = server.create_database(f"chaos_{provider}")
        engine = Database(url).engine()
        report = run_chaos(
            engine, url.replace("postgresql+psycopg://", "postgresql://", 1), provider=provider,
            messages=args.messages, workers=args.workers, kill_for_seconds=args.kill_for,
            deadline_seconds=args.kill_for + 120, seed=n + 1,
        )
        engine.dispose()
        print(report.row(), flush=True)
        if report.lost or (provider == "http" and report.duplicates) or not report.duplicates_explained:
            sys.exit(f"chaos run broke a promise: {report}")


if __name__ == "__main__":
    main()
