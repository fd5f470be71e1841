"""Roles that run once across every host: whoever holds a PostgreSQL session advisory lock does the work.

Any number of ``serve`` processes, on any number of hosts, share one
database. The delivery workers share the outbox through their leases; but
the catch-up runner and the writer of closed flood counts are one job each
for the whole deployment. Run on every host they would only race each
other for the same rows. So each such role has an advisory lock, and a
process runs the role only while one session of its own holds that lock:

- a process that does not hold it tries again every ``retry_seconds``;
- the lock lives as long as its session: a holder that dies (killed, its
  host gone, its connection cut, its database failed over) loses it with
  the session, and another process takes the role at its next try;
- the holder checks its session every ``retry_seconds``, and stops the role
  as soon as the session is gone.

Correctness never rests on the lock. Between a session dying and its
process noticing, two processes may run a role at once; both roles are safe
that way by themselves (the catch-up runner locks each projection's
checkpoint row with SKIP LOCKED and folds a batch in the transaction that
moves it, so nothing is folded twice; the counts writer writes each stream's
counts under that stream's lock). The lock only keeps the work in one place.

Each holding session names itself in ``application_name`` (``authledger
<role> <holder>``), so ``holders`` can tell ``/readyz`` and ``/metrics``
which host runs which role, from any host.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Protocol

import psycopg
from attrs import frozen
from sqlalchemy import Connection, Engine, text

from infra.logs import error_line, log_event

log = logging.getLogger("authledger.roles")

# The first key of every role's lock (ASCII "auth"); the second is the role's own.
LOCK_SPACE = 0x61757468
APPLICATION = "authledger"
# How often a process tries for a role it lacks, and checks the session of one it holds: a dead holder's role
# is taken over within about this long.
RETRY_SECONDS = 1.0


@frozen
class Role:
    name: str
    key: int


CATCH_UP = Role("catch-up", 1)
CLOSED_COUNTS = Role("closed-counts", 2)
ROLES = (CATCH_UP, CLOSED_COUNTS)

# Who holds each role now: a session holding its lock, named by the holder's application_name.
HOLDERS = text("""
    SELECT l.objid::int AS key, a.application_name
      FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE l.locktype = 'advisory' AND l.granted AND l.classid = CAST(:space AS oid) AND l.objsubid = 2
""")


def this_holder(configured: str | None = None) -> str:
    """The name a process gives itself: ``AUTHLEDGER_HOST_NAME`` if set, else ``<host name>:<pid>``."""
    return configured or f"{socket.gethostname()}:{os.getpid()}"


def holders(connection: Connection) -> dict[str, str | None]:
    """Role name -> the holder running it now, None when no process does."""
    by_key = {row.key: row.application_name for row in connection.execute(HOLDERS, {"space": LOCK_SPACE})}
    named: dict[str, str | None] = {}
    for role in ROLES:
        application = by_key.get(role.key)
        prefix = f"{APPLICATION} {role.name} "
        named[role.name] = application[len(prefix):] if application and application.startswith(prefix) else (
            application or None)
    return named


class Background(Protocol):
    def run(self) -> None: ...

    def stop(self) -> None: ...


class LeaderOnly:
    """Runs a fresh ``make_part()`` (a loop with ``run``/``stop``) only while this process holds ``role``."""

    def __init__(self, engine: Engine, role: Role, make_part: Callable[[], Background], *, holder: str,
                 retry_seconds: float = RETRY_SECONDS) -> None:
        self.engine, self.role, self.make_part, self.holder = engine, role, make_part, holder
        self.retry_seconds = retry_seconds
        self.stopping = threading.Event()
        self.holding = threading.Event()  # set while the role runs here

    def run(self) -> None:
        # psycopg directly, as the LISTEN helper does: the pool must not hand
        # this session to anyone, and the lock must die with it.
        _, arguments = self.engine.dialect.create_connect_args(self.engine.url)
        name = f"{APPLICATION} {self.role.name} {self.holder}"[:63]  # PostgreSQL keeps 63 bytes
        while not self.stopping.is_set():
            try:
                with psycopg.connect(**arguments, autocommit=True, application_name=name) as session:
                    if self._take(session):
                        self._hold(session)
            except psycopg.Error as error:
                if self.stopping.is_set():
                    return
                log_event(log, "role session lost", logging.WARNING, role=self.role.name, holder=self.holder,
                          error=error_line(error))
                self.stopping.wait(self.retry_seconds)

    def stop(self) -> None:
        self.stopping.set()

    def _take(self, session: psycopg.Connection) -> bool:
        """Try for the lock until it is ours (True) or we are stopping (False)."""
        while not self.stopping.is_set():
            row = session.execute("SELECT pg_try_advisory_lock(%s, %s)", (LOCK_SPACE, self.role.key)).fetchone()
            if row is not None and row[0]:
                return True
            self.stopping.wait(self.retry_seconds)
        return False

    def _hold(self, session: psycopg.Connection) -> None:
        """Run the role while the session (and so the lock) lives; stop it when either ends."""
        part = self.make_part()
        thread = threading.Thread(target=part.run, name=f"authledger-{self.role.name}", daemon=True)
        thread.start()
        self.holding.set()
        log_event(log, "role taken", role=self.role.name, holder=self.holder)
        try:
            while not self.stopping.wait(self.retry_seconds) and thread.is_alive():
                session.execute("SELECT 1")  # raises once the session is gone: the lock went with it
        finally:
            self.holding.clear()
            part.stop()
            thread.join(30.0)
            if not self.stopping.is_set():
                log_event(log, "role given up", logging.WARNING, role=self.role.name, holder=self.holder)
