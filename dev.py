#!/usr/bin/env python3
"""The two quick-start commands, from a clean clone with only Python installed.

    python3 dev.py serve   # run authledger on its embedded defaults
    python3 dev.py test    # ruff and mypy, then the whole test suite

Both create ./.venv and install the project into it when pyproject.toml has
changed since the last install, then hand over to the real command.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
STAMP = VENV / ".authledger-installed"


def ensure_environment() -> None:
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted:
        return
    if not (BIN / "python").exists():
        print("dev.py: creating .venv", file=sys.stderr)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print("dev.py: installing authledger and its test dependencies", file=sys.stderr)
    pip = [str(BIN / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--editable", f"{ROOT}[test]"], check=True)
    STAMP.write_text(wanted)


COMMANDS = {
    "serve": lambda args: [str(BIN / "authledger"), "serve", *args],
    "test": lambda args: [str(BIN / "python"), "-m", "pytest", *args],
}


def lint() -> None:
    """ruff and mypy, as pyproject.toml configures them, before any test: a finding fails the run."""
    for tool, args in (("ruff", ["check", "."]), ("mypy", [])):
        done = subprocess.run([str(BIN / tool), *args], cwd=ROOT, capture_output=True, text=True)
        said = (done.stdout + done.stderr).strip()
        if done.returncode != 0:
            print(said, file=sys.stderr)
            print(f"dev.py: {tool} failed (exit {done.returncode}), so no test ran", file=sys.stderr)
            sys.exit(done.returncode)
        print(f"dev.py: {tool}: {said.splitlines()[-1] if said else 'ok'}", file=sys.stderr)


def say_when_browser_tests_skip() -> None:
    missing = [name for name in ("chromium", "chromedriver") if shutil.which(name) is None]
    if missing:
        print(f"dev.py: {' and '.join(missing)} not found, so the browser tests (tests/console/test_browser*.py, "
              "tests/http/test_docs_in_a_browser.py) will be SKIPPED; install them with "
              "`apt-get install chromium chromium-driver` (CI's .ci/run does)", file=sys.stderr)


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(f"usage: python3 dev.py {{{'|'.join(COMMANDS)}}} [args...]")
    ensure_environment()
    if sys.argv[1] == "test":
        lint()
        say_when_browser_tests_skip()
    command = COMMANDS[sys.argv[1]](sys.argv[2:])
    os.chdir(ROOT)
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
