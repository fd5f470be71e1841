"""The one way a test waits: for a condition to hold, never for an amount of time to pass.

The timeout only keeps a broken build from hanging; nothing is asserted about
how long the wait took.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Engine, text

T = TypeVar("T")

POLL_SECONDS = 0.02


def wait_until(condition: Callable[[], T], *, timeout: float = 30.0, what: str | Callable[[], str]) -> T:
    """``condition()``'s first truthy answer; ``AssertionError`` saying it waited for ``what`` otherwise.

    ``what`` may be a function, asked only on failure: the state that explains it.

    ``condition`` may itself raise ``AssertionError`` to stop the wait early
    with its own message (a subprocess that died, for instance).
    """
    deadline = time.monotonic() + timeout
    while True:
        if answer := condition():
            return answer
        if time.monotonic() >= deadline:
            raise AssertionError(f"waited {timeout:g} s for {what() if callable(what) else what}, in vain")
        time.sleep(POLL_SECONDS)


def listening(engine: Engine, channel: str) -> bool:
    """Whether a session of ``engine``'s database is listening on ``channel`` (its last statement the LISTEN)."""
    with engine.connect() as connection:
        return bool(connection.execute(_LISTENERS, {"listen": f'LISTEN "{channel}"'}).scalar_one())


_LISTENERS = text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = :listen")


def lock_waiters(engine: Engine) -> int:
    """Sessions of the server waiting for an advisory lock another holds: a request queued behind one in flight."""
    with engine.connect() as connection:
        return connection.execute(_LOCK_WAITERS).scalar_one()


_LOCK_WAITERS = text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
