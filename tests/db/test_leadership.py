"""A once-only role runs in one process at a time, and moves when its holder's session dies."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, text

from infra.db.leadership import CATCH_UP, CLOSED_COUNTS, LeaderOnly, Role, holders
from tests.support.waiting import wait_until


class Job:
    """A role's loop that says when it runs: ``run`` until ``stop``."""

    def __init__(self, name: str, said: list[str]) -> None:
        self.name, self.said, self.stopping = name, said, threading.Event()

    def run(self) -> None:
        self.said.append(f"{self.name} started")
        self.stopping.wait()
        self.said.append(f"{self.name} stopped")

    def stop(self) -> None:
        self.stopping.set()


@contextmanager
def running(*contenders: LeaderOnly) -> Iterator[None]:
    threads = [threading.Thread(target=c.run, daemon=True) for c in contenders]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        for contender in contenders:
            contender.stop()
        for thread in threads:
            thread.join(10)


def contender(engine: Engine, holder: str, said: list[str], role: Role = CATCH_UP) -> LeaderOnly:
    return LeaderOnly(engine, role, lambda: Job(holder, said), holder=holder, retry_seconds=0.05)


def roles_now(engine: Engine) -> dict[str, str | None]:
    with engine.connect() as connection:
        return holders(connection)


def test_of_two_contenders_one_runs_the_role_and_the_other_takes_it_when_its_session_is_cut(
    engine: Engine, admin_engine: Engine
) -> None:
    said: list[str] = []
    a, b = contender(engine, "host-a", said), contender(engine, "host-b", said)
    with running(a):
        wait_until(lambda: a.holding.is_set() or None, what="host-a to take the role")
        with running(b):
            assert roles_now(engine)["catch-up"] == "host-a" and not b.holding.is_set()
            with admin_engine.begin() as connection:
                cut = connection.execute(text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = 'authledger catch-up host-a'")).scalars().all()
            assert cut == [True]

            wait_until(lambda: b.holding.is_set() or None, what="host-b to take the role")
            assert roles_now(engine)["catch-up"] == "host-b"
            # host-a stops its role once it sees its session gone; host-b may start before that (the
            # roles are safe run twice for that moment: infra/db/leadership.py says why).
            wait_until(lambda: "host-a stopped" in said or None, what="host-a to stop its role")
            assert said[0] == "host-a started" and sorted(said) == ["host-a started", "host-a stopped",
                                                                    "host-b started"], said
            wait_until(lambda: (a.holding.is_set() is False and "host-a" not in roles_now(engine).values()) or None,
                       what="host-a to be waiting again")
    assert said[-1] == "host-b stopped", "stopping a holder stops its role"
    # Its session ends as the holder stops; the server lets the lock go as that backend exits.
    wait_until(lambda: roles_now(engine) == {"catch-up": None, "closed-counts": None} or None,
               what="a stopped holder to let its lock go")


def test_each_role_has_its_own_lock(engine: Engine) -> None:
    said: list[str] = []
    catching_up = contender(engine, "host-a", said, CATCH_UP)
    counting = contender(engine, "host-b", said, CLOSED_COUNTS)
    with running(catching_up, counting):
        wait_until(lambda: (catching_up.holding.is_set() and counting.holding.is_set()) or None,
                   what="both roles taken")
        assert roles_now(engine) == {"catch-up": "host-a", "closed-counts": "host-b"}
