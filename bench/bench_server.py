"""One embedded PostgreSQL per benchmark run, with a fresh database built from schema.sql.

Shared by the benchmarks whose set-up is just that (seal, rebuild, chaos), so
that each states only what it measures.
"""

from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
from pathlib import Path

from attrs import frozen
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infra.db.embedded import start_embedded, stop_embedded  # after the path set-up
from infra.db.schema import init_schema

SHOWN_SETTINGS = ("server_version", "fsync", "synchronous_commit", "shared_buffers")


@frozen
class BenchServer:
    uri: str  # libpq URI of the server's maintenance database
    settings: dict[str, str]  # the server settings a result depends on

    def database_url(self, name: str) -> str:
        """The SQLAlchemy URL of database ``name`` on this server (which may not exist yet)."""
        admin_url = make_url(self.uri.replace("postgresql://", "postgresql+psycopg://", 1))
        return admin_url.set(database=name).render_as_string(hide_password=False)

    def create_database(self, name: str) -> str:
        """A new database with authledger's schema; its SQLAlchemy URL."""
        admin_url = make_url(self.uri.replace("postgresql://", "postgresql+psycopg://", 1))
        server = create_engine(admin_url, isolation_level="AUTOCOMMIT")
        with server.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        server.dispose()
        url = self.database_url(name)
        schema = create_engine(url)
        init_schema(schema)
        schema.dispose()
        return url

    def describe(self) -> str:
        s = self.settings
        return (f"PostgreSQL {s['server_version']} (embedded; fsync={s['fsync']}, "
                f"synchronous_commit={s['synchronous_commit']}, shared_buffers={s['shared_buffers']})")


def start_bench_server(prefix: str, data_dir: Path | None = None, shared_buffers: str | None = None,
                       statements: bool = False) -> BenchServer:
    """Start an embedded server in a temporary directory, stopped and removed at exit.

    With ``data_dir``, the server lives there instead and is kept (stopped at
    exit, not removed), so that a later run can reuse a log that took long to build.
    With ``shared_buffers`` (e.g. "4GB"), the server is set so (ALTER SYSTEM)
    and restarted; with ``statements``, it loads pg_stat_statements (planning
    tracked, the view in its maintenance database). Without them, a kept
    server goes back to the defaults.
    """
    if data_dir is None:
        data_dir = Path(tempfile.mkdtemp(prefix=prefix))
        atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
    atexit.register(stop_embedded, data_dir)  # runs first: stop, then remove
    uri = start_embedded(data_dir)
    altered = (data_dir / "pgdata" / "postgresql.auto.conf").read_text()
    if shared_buffers is not None or statements or "shared_buffers" in altered or "pg_stat_statements" in altered:
        server = create_engine(uri.replace("postgresql://", "postgresql+psycopg://", 1), isolation_level="AUTOCOMMIT")
        with server.connect() as connection:
            connection.execute(text("ALTER SYSTEM RESET shared_buffers" if shared_buffers is None else
                                    f"ALTER SYSTEM SET shared_buffers = '{shared_buffers}'"))
            for setting, value in (("shared_preload_libraries", "pg_stat_statements"),
                                   ("pg_stat_statements.track_planning", "on")):
                connection.execute(text(f"ALTER SYSTEM SET {setting} = '{value}'" if statements else
                                        f"ALTER SYSTEM RESET {setting}"))
        server.dispose()
        stop_embedded(data_dir)  # the settings take a restart
        uri = start_embedded(data_dir)
    engine = create_engine(uri.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.connect() as connection:
        settings = {name: connection.execute(text(f"SHOW {name}")).scalar_one() for name in SHOWN_SETTINGS}
        if statements:
            connection.execute(text("CREATE EXTENSION IF NOT EXISTS pg_stat_statements"))
            connection.commit()
    engine.dispose()
    return BenchServer(uri, settings)
