"""The embedded PostgreSQL lives exactly as long as the authledger processes that use it."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.support.cli import process_env
from tests.support.embedded import fresh_data_dir
from tests.support.servers import AUTHLEDGER
from tests.support.waiting import wait_until

def postgres_serving(pgdata: Path) -> list[psutil.Process]:
    """The postmaster processes whose data directory is ``pgdata``."""
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        if process.info["name"] == "postgres" and str(pgdata) in (process.info["cmdline"] or []):
            found.append(process)
    return found


def state_of(pgdata: Path) -> str:
    """What a failure needs to say: the recorded users, the watchdogs, the server log's tail."""
    watchdogs = [p.pid for p in psutil.process_iter(["cmdline"])
                 if "infra.db.watchdog" in " ".join(p.info["cmdline"] or []) and str(pgdata) in p.info["cmdline"]]
    users = (pgdata / ".handle_pids.json").read_text() if (pgdata / ".handle_pids.json").exists() else "none"
    log = (pgdata / "log").read_text()[-600:] if (pgdata / "log").exists() else ""
    return f"users {users}, watchdogs {watchdogs}, server log ends: {log}"


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def data_dir() -> Iterator[Path]:
    with fresh_data_dir() as path:
        yield path


@pytest.mark.slow
def test_the_embedded_server_stops_within_seconds_after_serve_is_killed(data_dir: Path) -> None:
    serve_err = data_dir.parent / "serve.err"  # beside the data, not in a basetemp another session may prune
    env = process_env({"DATABASE_URL": None})
    env.update({"AUTHLEDGER_DATA_DIR": str(data_dir), "AUTHLEDGER_LOG_FORMAT": "json"})
    port = free_port()
    with serve_err.open("wb") as err:
        serve = subprocess.Popen([AUTHLEDGER, "serve", "--port", str(port), "--processes", "2"], env=env,
                                 stdout=subprocess.DEVNULL, stderr=err)
    try:
        def healthy() -> bool | None:
            assert serve.poll() is None, serve_err.read_text()
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200 or None
            except httpx.TransportError:
                return None

        wait_until(healthy, what="serve to answer", timeout=90)
        pgdata = (data_dir / "pgdata").resolve()
        assert postgres_serving(pgdata), "serve runs on the embedded server"
        tree = wait_until(lambda: processes_of(serve.pid, api_processes=2), what="both API processes")
    finally:
        serve.send_signal(signal.SIGKILL)
        serve.wait()  # reaped: the pid is really gone, as it is under a shell or a supervisor

    wait_until(lambda: not postgres_serving(pgdata), what=f"the embedded server to stop ({state_of(pgdata)})",
               timeout=10)
    assert not (pgdata / "postmaster.pid").exists(), "stopped cleanly, not left for the next start to recover"
    wait_until(lambda: not any(map(running, tree)), what="serve's API processes to end with it", timeout=10)


def processes_of(pid: int, *, api_processes: int) -> list[psutil.Process] | None:
    """Every process under ``pid`` (multiprocessing's resource tracker too), once its API processes are there."""
    tree = psutil.Process(pid).children(recursive=True)
    spawned = [process for process in tree if "spawn_main" in " ".join(process.cmdline())]
    return tree if len(spawned) >= api_processes else None


def running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE  # ended, and not yet reaped by whoever adopted it
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
def test_db_url_and_db_shell_reach_the_embedded_server_which_stops_when_psql_exits(data_dir: Path) -> None:
    env = process_env({"DATABASE_URL": None})
    env["AUTHLEDGER_DATA_DIR"] = str(data_dir)
    pgdata = (data_dir / "pgdata").resolve()
    url = subprocess.run([AUTHLEDGER, "db", "url"], env=env, capture_output=True, text=True, timeout=120)
    assert url.returncode == 0, url.stderr
    assert url.stdout == f"postgresql://postgres:@/postgres?host={pgdata}\n"
    assert "the embedded server runs while an authledger process uses it" in url.stderr

    shell = subprocess.run([AUTHLEDGER, "db", "shell", "-tA", "-c", "SELECT current_database()"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert shell.returncode == 0 and shell.stdout.strip() == "postgres", shell.stderr
    wait_until(lambda: not postgres_serving(pgdata), what="the embedded server to stop after psql", timeout=10)
