"""The test harness: one real PostgreSQL per session, a fresh database per test.

The server is the embedded one unless TEST_DATABASE_URL names another (its
user must be allowed to create databases and roles). A template database is
built once from schema.sql; each test gets its own clone, which takes a few
milliseconds and leaves no state behind for the next test.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from domain.send_limits import SendLimits
from infra.clock import ManualClock
from infra.db.engine import Database
from infra.services.unit_of_work import ServiceContext
from infra.db.embedded import start_embedded, stop_embedded
from infra.db.schema import init_schema
from tests.support.cli import cli_env
from tests.support.embedded import fresh_data_dir
from tests.support.erasure_races import NonceRecorder
from tests.support.keys import TEST_KEYS, TEST_MASTER_KEY

# Personal data is sealed under a master key from configuration (infra/eventlog/subject_keys.py).
# Engines nobody bound, and every CLI run and subprocess of the suite, read
# it from the environment: the same test key everywhere, whatever the shell holds.
os.environ["AUTHLEDGER_MASTER_KEY"] = TEST_MASTER_KEY

# Every test clones a database from the template, and on a disk each clone
# writes the template's files and each drop deletes them: on an ext4 disk a
# clone slowed from 14 to 130 ms over 200 clones, where in memory it stays at
# 9-11 ms. So the suite's server keeps its data in memory (Linux's /dev/shm)
# when there is room there, and in the temporary directory otherwise.
MEMORY_DIR = Path("/dev/shm")
MEMORY_DIR_ROOM = 2 * 1024**3  # bytes free: the data directory, its WAL and a few databases at once, with margin


def _data_dir_parent() -> Path | None:
    """/dev/shm when it is there, writable and roomy; None (the temporary directory) otherwise."""
    try:
        free = os.statvfs(MEMORY_DIR)
    except OSError:
        return None
    roomy = free.f_bavail * free.f_frsize >= MEMORY_DIR_ROOM
    return MEMORY_DIR if roomy and os.access(MEMORY_DIR, os.W_OK) else None


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Engine]:
    """An engine on the server's maintenance database, autocommit, for CREATE DATABASE."""
    external = os.environ.get("TEST_DATABASE_URL")
    # Not pytest's tmp_path: concurrent pytest runs prune each other's
    # basetemp, which would pull the data directory from under the server.
    data_dir = None if external else Path(tempfile.mkdtemp(prefix="authledger-test-pg-", dir=_data_dir_parent()))
    url = external or start_embedded(data_dir)
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1), isolation_level="AUTOCOMMIT")
    if data_dir is not None:
        with engine.connect() as connection:
            # Durability is not what these tests are about; speed is welcome.
            connection.execute(text("ALTER SYSTEM SET fsync = off"))
            connection.execute(text("ALTER SYSTEM SET synchronous_commit = off"))
            connection.execute(text("ALTER SYSTEM SET max_connections = 300"))
            connection.execute(text("SELECT pg_reload_conf()"))
    yield engine
    engine.dispose()
    if data_dir is not None:
        stop_embedded(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


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


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def nonces() -> NonceRecorder:
    """Every nonce a create of ``racing_ctx`` drew, for the erasure races to look for afterwards."""
    return NonceRecorder()


@pytest.fixture
def racing_ctx(engine: Engine, clock: ManualClock, nonces: NonceRecorder) -> ServiceContext:
    """Services whose new requests draw their nonces from ``nonces`` (the erasure races, services and HTTP)."""
    return ServiceContext(engine=engine, keys=TEST_KEYS, clock=clock, reset_url="https://app.test/reset",
                          new_nonce=nonces)


# Most tests send to one address for many users, which the default per-address limit (six an hour) would
# refuse: they test other things. The limits' own tests (tests/services/test_send_limits.py,
# tests/http/test_limits.py) run with the defaults, SendLimits().
ROOMY_SEND_LIMITS = SendLimits(per_address=100_000, per_address_per_ip=99_999, per_user_per_ip=1000,
                               per_ip=100_000, verifies_per_ip=100_000)


@pytest.fixture
def ctx(engine: Engine, clock: ManualClock) -> ServiceContext:
    """Service functions on this test's database, with a hand-moved clock, fixed keys and roomy send limits."""
    return ServiceContext(engine=engine, keys=TEST_KEYS, clock=clock, reset_url="https://app.test/reset",
                          send_limits=ROOMY_SEND_LIMITS)


@pytest.fixture
def env(database_url: str, tmp_path: Path) -> dict[str, str | None]:
    """The settings a CLI run or a process of this test starts from: its database, the test keys, JSON logs,
    a Maildir and a reset page of its own. Override it in a module to add what that module is about."""
    return cli_env(database_url, AUTHLEDGER_MAILDIR=str(tmp_path / "maildir"),
                   AUTHLEDGER_RESET_URL="https://app.test/reset", AUTHLEDGER_LOG_FORMAT="json")


@pytest.fixture
def embedded_data_dir() -> Iterator[Path]:
    """An empty AUTHLEDGER_DATA_DIR for a test that runs authledger on the embedded default (tests/support/embedded.py
    says why it is not under tmp_path)."""
    with fresh_data_dir() as data_dir:
        yield data_dir
