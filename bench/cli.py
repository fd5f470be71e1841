"""CLI start-up beside `python -c "import click"`, in the same run (issue 13).

    .venv/bin/python bench/cli.py [--runs 15]

Times, as wall clock from spawn to exit, ``authledger --help``,
``authledger config show`` and ``python -c "import click"`` (the floor: an
interpreter and the CLI library, nothing of ours). The three alternate run
by run, so that load on the machine falls on all of them alike; each figure
is the median over ``--runs``. ``config show`` runs in an empty temporary
directory with no DATABASE_URL: it reads the configuration and prints it,
touching no database. The ratios to the floor are the result; the issue asks
for at most 2.5x.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

AUTHLEDGER = str(Path(sys.executable).parent / "authledger")
CASES = {
    'python -c "import click"': [sys.executable, "-c", "import click"],
    "authledger --help": [AUTHLEDGER, "--help"],
    "authledger config show": [AUTHLEDGER, "config", "show"],
}
AIM = 2.5


def wall_time(command: list[str], cwd: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="runs of each command (default 15)")
    args = parser.parse_args()
    env = {name: value for name, value in os.environ.items() if name != "DATABASE_URL"}
    samples: dict[str, list[float]] = {name: [] for name in CASES}
    with tempfile.TemporaryDirectory(prefix="authledger-bench-cli-") as cwd:
        for command in CASES.values():  # warm the page cache and byte-code first
            wall_time(command, cwd, env)
        for _ in range(args.runs):
            for name, command in CASES.items():
                samples[name].append(wall_time(command, cwd, env))
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}, "
          f"Python {platform.python_version()}; {args.runs} runs each, interleaved; medians\n")
    floor = statistics.median(samples['python -c "import click"'])
    print("| command | median (ms) | min (ms) | × import click |\n|---|---|---|---|")
    for name, times in samples.items():
        median = statistics.median(times)
        print(f"| `{name}` | {median * 1000:.0f} | {min(times) * 1000:.0f} | {median / floor:.2f} |")
    worst = max(statistics.median(times) for times in samples.values()) / floor
    print(f"\nworst ratio {worst:.2f} (aim ≤ {AIM})")


if __name__ == "__main__":
    main()
