"""The test harness: one real PostgreSQL per session, a fresh database per test.

The server is the embedded one unless TEST_DATABASE_URL names another (its
user must be allowed to create databases and roles). A template database is
built once from schema.sql; each test gets its own clone, which takes a few
milliseconds and leaves no state behind for the next test.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from infra.database import Database
from infra.embedded import start_embedded
from infra.schema import init_schema


def _admin_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = os.environ.get("TEST_DATABASE_URL")
    if url:
        return url.replace("postgresql://", "postgresql+psycopg://", 1)
    data_dir = Path(tmp_path_factory.mktemp("embedded-pg"))
    return start_embedded(data_dir).replace("postgresql://", "postgresql+psycopg://", 1)


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """An engine on the server's maintenance database, autocommit, for CREATE DATABASE."""
    engine = create_engine(_admin_url(tmp_path_factory), isolation_level="AUTOCOMMIT", poolclass=None)
    if not os.environ.get("TEST_DATABASE_URL"):
        with engine.connect() as connection:
            # Durability is not what these tests are about; speed is welcome.
            connection.execute(text("ALTER SYSTEM SET fsync = off"))
            connection.execute(text("ALTER SYSTEM SET synchronous_commit = off"))
            connection.execute(text("ALTER SYSTEM SET max_connections = 300"))
            connection.execute(text("SELECT pg_reload_conf()"))
    yield engine
    engine.dispose()


def _database_url(server: Engine, name: str) -> str:
    return make_url(server.url).set(database=name).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def template_database(pg_server: Engine) -> str:
    name = f"authledger_template_{os.getpid()}"
    with pg_server.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    engine = create_engine(_database_url(pg_server, name))
    init_schema(engine)
    engine.dispose()
    return name


@pytest.fixture
def database(pg_server: Engine, template_database: str) -> Iterator[Database]:
    """A fresh database cloned from the schema template, dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    with pg_server.connect() as connection:
        version = connection.execute(text("SHOW server_version_num")).scalar_one()
        strategy = " STRATEGY = FILE_COPY" if int(version) >= 150000 else ""
        connection.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template_database}"{strategy}'))
    yield Database(_database_url(pg_server, name))
    with pg_server.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def engine(database: Database) -> Iterator[Engine]:
    """Connections as the application role: SELECT and INSERT on the log only."""
    engine = database.engine(pool_size=10)
    yield engine
    engine.dispose()


@pytest.fixture
def admin_engine(database: Database) -> Iterator[Engine]:
    engine = database.admin_engine()
    yield engine
    engine.dispose()


@pytest.fixture
def database_url(database: Database) -> str:
    """The libpq URL of this test's database, for subprocesses and the CLI."""
    return database.url.replace("postgresql+psycopg://", "postgresql://", 1)
