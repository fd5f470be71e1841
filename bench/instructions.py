"""Instructions an in-process create executes, counted by callgrind: a figure the machine's load does not move.

    .venv/bin/python bench/instructions.py [--flow otp|reset] [--calls 300] [--warm 100] [--against DIR]

Wall and CPU times of one create moved by a third between runs of the same
code on this shared 2-core machine (bench/history/issue-13-2026-12-02.md,
"The payloads as one JSON array"); the instructions it executes repeat
within a few percent.
Each checkout measured runs in a process of its own under `valgrind
--tool=callgrind --instr-atstart=no`, on its own embedded PostgreSQL (which
valgrind does not follow): it makes ``--warm`` creates of brand-new users,
then counts only while it makes ``--calls`` more (`callgrind_control`
switches counting on and off around them). With ``--against DIR`` (another
checkout from 918ed03 on, e.g. `git worktree add /tmp/base HEAD~1`) the
same creates run in that checkout's code, in turn with this one's, twice
each, and the ratio is printed.

Counts cover the client only (the service call, SQLAlchemy, psycopg, the
codec): the server's work is not in them. Needs Debian's valgrind.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from uuid import uuid4

ROOT = Path(__file__).resolve().parent.parent
TOTALS = re.compile(r"^totals:\s+(\d+)", re.MULTILINE)


def child(checkout: Path, flow: str, calls: int, warm: int) -> None:
    """Under valgrind, in ``checkout``'s code: warm up, say "ready", make the counted calls on the next line,
    say "done", exit on the next."""
    sys.path[:0] = [str(checkout), str(checkout / "bench")]
    import one_user  # from the checkout measured, once its path is set
    from infra.db.engine import Database

    server = one_user.start_bench_server("authledger-bench-instructions-")
    engine = Database(server.create_database("bench_instructions")).engine(pool_size=2)
    _, _, create = one_user.creates_on_a_hand_moved_clock(engine, flow)
    for _ in range(warm):
        create(f"warm-{uuid4().hex[:8]}")()
    counted = [create(f"user-{uuid4().hex[:8]}") for _ in range(calls)]
    print("ready", flush=True)
    sys.stdin.readline()
    for call in counted:
        call()
    print("done", flush=True)
    sys.stdin.readline()
    engine.dispose()


def count(checkout: Path, flow: str, calls: int, warm: int) -> float:
    """Instructions a create in ``checkout`` executes, on average over ``calls``."""
    with tempfile.TemporaryDirectory(prefix="authledger-callgrind-") as out:
        command = ["valgrind", "-q", "--tool=callgrind", "--instr-atstart=no",
                   f"--callgrind-out-file={out}/callgrind.out", sys.executable, __file__, "--child", str(checkout),
                   "--flow", flow, "--calls", str(calls), "--warm", str(warm)]
        # Its stderr is ours: what fails in the measured process shows.
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert process.stdin is not None and process.stdout is not None

        def step(said: str, instrumentation: str) -> None:
            while (line := process.stdout.readline()) and line.strip() != said:
                pass  # what the bench server says of itself
            if not line:
                sys.exit(f"{checkout}: the measured process ended before it said {said!r}")
            subprocess.run(["callgrind_control", "-i", instrumentation, str(process.pid)], check=True,
                           capture_output=True)
            process.stdin.write("\n")
            process.stdin.flush()

        step("ready", "on")
        step("done", "off")
        if process.wait(timeout=600) != 0:
            sys.exit(f"{checkout}: the measured process exited with {process.returncode}")
        found = TOTALS.search(Path(out, "callgrind.out").read_text())
        assert found is not None, "callgrind wrote no totals"
        return int(found.group(1)) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flow", choices=("otp", "reset"), default="otp", help="what is created (default otp)")
    parser.add_argument("--calls", type=int, default=300, help="creates counted (default 300)")
    parser.add_argument("--warm", type=int, default=100, help="creates before counting (default 100)")
    parser.add_argument("--against", type=Path, help="another checkout to measure in turn with this one")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # the checkout to measure, under valgrind
    args = parser.parse_args()
    if args.calls < 1 or args.warm < 0:
        parser.error("--calls takes 1 or more, --warm 0 or more")
    if args.child is not None:
        child(args.child, args.flow, args.calls, args.warm)
        return
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("bench/instructions.py needs valgrind: apt-get install valgrind")
    if args.against is not None and not (args.against / "bench" / "one_user.py").exists():
        sys.exit(f"{args.against} is not a checkout of authledger (no bench/one_user.py)")
    checkouts = [ROOT] if args.against is None else [args.against, ROOT, args.against, ROOT]
    print(f"{args.flow} create, brand-new users: instructions a call over {args.calls} calls after {args.warm}\n")
    print("| checkout | instructions a create |")
    print("|---|---:|")
    figures: dict[Path, list[float]] = {}
    for checkout in checkouts:
        figures.setdefault(checkout, []).append(count(checkout, args.flow, args.calls, args.warm))
        print(f"| {checkout} | {figures[checkout][-1] / 1e6:.2f}M |", flush=True)
    if args.against is not None:
        base, this = (min(figures[path]) for path in (args.against, ROOT))
        print(f"\nthis checkout ÷ {args.against}, the lower of each pair's runs: {this / base:.3f}")


if __name__ == "__main__":
    main()
