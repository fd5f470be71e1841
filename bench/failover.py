"""A PostgreSQL failover under load: what was acknowledged, lost, sent twice, and how long the API said 503.

    PYTHONPATH=$PWD .venv/bin/python bench/failover.py [--threads 8] [--before 200] [--after 200]
        [--async-rounds 3] [--stalled 50] [--quick]

Starts a primary and a standby from the embedded wheel's own binaries, runs
`serve` and two workers on their multi-host URL under a pool of keyed creates
(tests/support/failover.py), SIGKILLs the primary, promotes the standby once
503s are answered, and prints one markdown row per run: first with the
standby synchronous (the documented production set-up: nothing acknowledged
may be lost), then ``--async-rounds`` times with it asynchronous, where the
row's "lost" is what acknowledged 202s a promotion forgot. On one machine the
standby is never far behind, so the asynchronous runs are repeated with the
primary's WAL senders stopped for the last ``--stalled`` 202s before the
kill, as a congested link between two hosts would leave it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.failover import FailoverReport, run_failover
from tests.support.replication import replicated_pair

HEADER = (
    "| replication | answered 202 | lost | undelivered | duplicated in effect | 503s meanwhile "
    "| kill → first 202 after promotion (s) | other answers |\n|---|---|---|---|---|---|---|---|"
)


def row(replication: str, report: FailoverReport) -> str:
    return (f"| {replication} | {report.accepted} | {report.lost} | {report.undelivered} | {report.duplicated} | "
            f"{report.unavailable} | {report.seconds_to_first_202:.2f} | {report.other_answers or 'none'} |")


def one_run(*, synchronous: bool, threads: int, before: int, after: int, stalled: int = 0) -> FailoverReport:
    work = Path(tempfile.mkdtemp(prefix="authledger-failover-bench-"))
    try:
        with replicated_pair(synchronous=synchronous) as pair:
            return run_failover(pair, work, threads=threads, before=before, after=after, stalled=stalled)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=8, help="client threads creating resets")
    parser.add_argument("--before", type=int, default=200, help="202s from the primary before the kill")
    parser.add_argument("--after", type=int, default=200, help="202s from the promoted standby before stopping")
    parser.add_argument("--async-rounds", type=int, default=3, help="runs with an asynchronous standby")
    parser.add_argument("--stalled", type=int, default=50,
                        help="in the stalled asynchronous runs, 202s answered while the standby's link is stopped")
    parser.add_argument("--quick", action="store_true", help="4 threads, 30 and 30 202s, one asynchronous run")
    args = parser.parse_args()
    if args.quick:
        args.threads, args.before, args.after, args.async_rounds, args.stalled = 4, 30, 30, 1, 10

    print(HEADER, flush=True)
    synchronous = one_run(synchronous=True, threads=args.threads, before=args.before, after=args.after)
    print(row("synchronous", synchronous), flush=True)
    lost_async = 0
    for _ in range(args.async_rounds):
        report = one_run(synchronous=False, threads=args.threads, before=args.before, after=args.after)
        lost_async += report.lost
        print(row("asynchronous", report), flush=True)
    lost_stalled = 0
    for _ in range(args.async_rounds):
        report = one_run(synchronous=False, threads=args.threads, before=args.before, after=args.after,
                         stalled=args.stalled)
        lost_stalled += report.lost
        print(row(f"asynchronous, link stalled for {args.stalled} 202s", report), flush=True)
    print(f"\nasynchronous: {lost_async} acknowledged requests lost over {args.async_rounds} failovers; "
          f"{lost_stalled} with the link stalled for the last {args.stalled} 202s before each kill")
    if (synchronous.lost or synchronous.unacknowledged or synchronous.duplicated or synchronous.undelivered
            or synchronous.other_answers):
        sys.exit(f"the synchronous failover broke a promise: {synchronous}")


if __name__ == "__main__":
    main()
