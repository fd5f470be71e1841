"""Every command block of README.md and docs/*.md runs as written, against a fresh embedded data directory.

The blocks (```sh, and the ``$ `` lines of a terminal session shown in a
plain ``` block) are read from the Markdown, never copied into this test, so a
command that stops working fails here. Each file's blocks run in order in
one bash (``set -e -o pipefail``), so a later block may use what an earlier
one set, as a reader pasting them in turn would; ``authledger serve`` runs
in the background on a free port, given to the docs as ``$API``.

That bash is a newcomer's new shell after the quick start: its PATH holds no
virtual environment, so ``authledger`` is found only once the README's own
activation line (``. .venv/bin/activate``, run as written from a folder
whose ``.venv`` is the clone's) put it there. The README runs it where it
stands; every page of docs/ starts with it, as the README tells a reader to.

Two HTML comments, on the line before a block, change how it runs:
``<!-- not run: why -->`` leaves it out (a block that cannot run here, such
as one that starts the server in the foreground), and ``<!-- run twice: why
-->`` runs it twice in a row, as a reader pasting it again would. The
exclusions are counted, so that they cannot grow unnoticed.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from attrs import frozen

from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# README: the quick start (runs the suite, starts a server in the foreground);
# docs/development.md: the commands that run the suite and the checkers on the repository;
# docs/incident-review.md: four sessions over the worked example's own log.
EXCLUDED = 6
# The quick start's line that puts `authledger` on the PATH of a new shell, as README.md writes it.
ACTIVATION = ". .venv/bin/activate"
MARKER = re.compile(r"<!--\s*(not run|run twice):\s*(.+?)\s*-->")
BLOCK_START = "@@ block "
FAILED_AT = "@@ failed at script line "


@frozen
class Block:
    path: Path
    line: int  # of the opening fence
    code: str
    skip_reason: str | None = None
    twice: bool = False

    @property
    def where(self) -> str:
        return f"{shown(self.path)}:{self.line}"


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def command_blocks(path: Path) -> list[Block]:
    """The command blocks of one Markdown file, with the marker on the line before each, if any.

    A command block is a ```sh block, or a plain ``` block that shows a
    terminal session: its ``$ `` lines are the commands (the other lines,
    their output, become blank lines so that line numbers still match).
    """
    lines = path.read_text().splitlines()
    blocks, index = [], 0
    while index < len(lines):
        fence = lines[index].strip()
        if not fence.startswith("```"):
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].strip() == "```")
        body = lines[index + 1:end]
        session = fence == "```" and any(line.startswith("$ ") for line in body)
        if fence == "```sh" or session:
            marker = MARKER.search(lines[index - 1]) if index else None
            kind, reason = marker.groups() if marker else (None, None)
            code = "\n".join(line.removeprefix("$ ") if line.startswith("$ ") else "" for line in body) \
                if session else "\n".join(body)
            blocks.append(Block(path, index + 1, code, reason if kind == "not run" else None, kind == "run twice"))
        index = end + 1
    return blocks


def activation_block() -> Block:
    """The README's block that activates the environment: its first line is exactly ``ACTIVATION``."""
    found = [block for block in command_blocks(ROOT / "README.md")
             if block.code.split("#")[0].strip() == ACTIVATION and block.skip_reason is None]
    assert len(found) == 1, f"README.md must show `{ACTIVATION}` as a block of its own, run by this test"
    return found[0]


def runnable_blocks(path: Path) -> list[Block]:
    """What a reader pastes into a new shell for ``path``: a page of docs/ starts with the README's activation."""
    blocks = [block for block in command_blocks(path) if block.skip_reason is None]
    return blocks if path == ROOT / "README.md" else [activation_block(), *blocks]


def script(blocks: list[Block]) -> tuple[str, dict[int, str]]:
    """One bash script running ``blocks`` in turn, and where each of its lines comes from in the docs.

    Each block is announced by a marker line; an ERR trap names the script
    line of the command that failed, which the map turns into file:line.
    """
    lines = ["set -e -o pipefail", f"trap 'echo \"{FAILED_AT}$LINENO: $BASH_COMMAND\"' ERR"]
    origin: dict[int, str] = {}
    for block in blocks:
        for _ in range(2 if block.twice else 1):
            lines.append(f"echo {shlex.quote(BLOCK_START + block.where)}")
            for offset, line in enumerate(block.code.splitlines(), start=1):
                lines.append(line)
                origin[len(lines)] = f"{shown(block.path)}:{block.line + offset}"
    return "\n".join(lines) + "\n", origin


def failure_report(output: str, origin: dict[int, str]) -> str:
    """Which block was running when the script stopped, which command failed, and what the block printed."""
    _, marker, after = output.rpartition(BLOCK_START)
    where, _, printed = after.partition("\n") if marker else ("(before the first block)", "", output)
    failed = re.search(rf"^{re.escape(FAILED_AT)}(\d+): (.*)$", printed, re.MULTILINE)
    command = f"; the command at {origin.get(int(failed[1]), '?')} failed: {failed[2]}" if failed else ""
    return f"the block at {where} stopped{command}. It printed:\n{printed}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def docs_env() -> Iterator[dict[str, str]]:
    """A fresh working directory with its own embedded data directory, and ``authledger serve`` on it."""
    # Not pytest's tmp_path: a concurrent pytest run makes its parent private
    # again, and the embedded server (its own OS user when run as root) must
    # reach the data directory.
    workdir = Path(tempfile.mkdtemp(prefix="authledger-docs-"))
    try:
        yield from _served(workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def newcomers_path() -> str:
    """This process's PATH without any virtual environment's ``bin``: what a new shell has before activating."""
    environments = {Path(sys.prefix), ROOT / ".venv", *([Path(os.environ["VIRTUAL_ENV"])]
                                                       if os.environ.get("VIRTUAL_ENV") else [])}
    kept = [entry for entry in os.environ.get("PATH", "").split(os.pathsep)
            if entry and not any(Path(entry).resolve() == (venv / "bin").resolve() for venv in environments)]
    return os.pathsep.join(kept)


def _served(workdir: Path) -> Iterator[dict[str, str]]:
    if not (ROOT / ".venv" / "bin" / "activate").exists():
        pytest.fail("no .venv in the clone to activate: run the suite with `python3 dev.py test`")
    # The working directory stands for the clone's folder: the README's
    # activation line finds the clone's .venv there, by the same relative path.
    (workdir / ".venv").symlink_to(ROOT / ".venv")
    port, runtime = free_port(), workdir / "runtime"
    runtime.mkdir()
    shell = {name: value for name, value in os.environ.items()
             if not name.startswith("AUTHLEDGER_")
             and name not in {"DATABASE_URL", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "BASH_ENV", "ENV"}}
    shell |= {
        "PATH": newcomers_path(),
        "API": f"http://127.0.0.1:{port}",
        "HOME": str(workdir),
        "PWD": str(workdir),
        # The embedded server's process lock lives in the runtime folder: a
        # folder of its own keeps the docs from queueing behind other test runs.
        "XDG_RUNTIME_DIR": str(runtime),
    }
    log = (workdir / "serve.log").open("w")
    # The server is this test's, not the reader's: started by its full path, on the data directory
    # the shell's commands find by default (.authledger in the working directory).
    serve = subprocess.Popen([str(Path(sys.executable).parent / "authledger"), "serve", "--port", str(port)],
                             cwd=workdir, env=shell | {"AUTHLEDGER_DATA_DIR": str(workdir / ".authledger")},
                             stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_until_ready(shell["API"], serve, workdir / "serve.log")
        yield shell
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=30)
        log.close()


def _wait_until_ready(api: str, serve: subprocess.Popen[bytes], log: Path) -> None:
    def ready() -> bool:
        assert serve.poll() is None, f"authledger serve exited {serve.returncode}:\n{log.read_text()}"
        try:
            return httpx.get(f"{api}/readyz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    wait_until(ready, timeout=60, what=lambda: f"authledger serve to be ready:\n{log.read_text()}")


def test_the_docs_mark_every_block_they_leave_out_and_say_why() -> None:
    excluded = [block for path in DOCS for block in command_blocks(path) if block.skip_reason is not None]

    assert all(len(block.skip_reason or "") >= 10 for block in excluded), [b.where for b in excluded]
    assert len(excluded) == EXCLUDED, (
        f"blocks left out: {[f'{b.where} ({b.skip_reason})' for b in excluded]}; "
        "make a new one run, or raise EXCLUDED and say why"
    )


def test_a_failing_doc_command_is_reported_with_its_file_line_and_output(tmp_path: Path) -> None:
    doc = tmp_path / "guide.md"
    doc.write_text("Intro.\n\n```sh\necho first\n```\n\n```sh\necho second\nfalse | cat\necho never\n```\n")
    code, origin = script(command_blocks(doc))

    run = subprocess.run(["bash", "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    assert run.returncode == 1
    report = failure_report(run.stdout, origin)
    assert report.startswith(f"the block at {doc}:7 stopped; the command at {doc}:9 failed: ")
    assert report.endswith("It printed:\nsecond\n" + run.stdout.rpartition("second\n")[2])
    assert "first" not in report and "never" not in report


def test_the_readme_activates_the_environment_before_its_first_authledger_command() -> None:
    runnable = runnable_blocks(ROOT / "README.md")
    first_use = next(index for index, block in enumerate(runnable) if re.search(r"^\s*authledger ", block.code, re.M))

    assert runnable.index(activation_block()) < first_use


def test_a_new_shell_finds_authledger_only_after_the_readmes_activation_line(docs_env: dict[str, str]) -> None:
    def found(code: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", code], cwd=docs_env["PWD"], env=docs_env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    before = found("authledger --help")
    after = found(f"{activation_block().code}\nauthledger --help")

    assert before.returncode == 127, before.stdout  # bash: authledger: command not found
    assert after.returncode == 0, after.stdout


RUNNABLE = [path for path in DOCS if any(block.skip_reason is None for block in command_blocks(path))]


@pytest.mark.slow  # a real serve and every block of a page: seconds each, the README half a minute
@pytest.mark.parametrize("path", RUNNABLE, ids=lambda path: path.name)
def test_every_command_block_of_the_docs_runs_as_written(path: Path, docs_env: dict[str, str]) -> None:
    code, origin = script(runnable_blocks(path))

    try:
        run = subprocess.run(["bash", "-c", code], cwd=docs_env["PWD"], env=docs_env, timeout=120,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as timeout:
        output = timeout.stdout if isinstance(timeout.stdout, str) else (timeout.stdout or b"").decode()
        pytest.fail(f"not finished within 120 s: {failure_report(output, origin)}")

    if run.returncode != 0:
        pytest.fail(f"exit {run.returncode}: {failure_report(run.stdout, origin)}")
