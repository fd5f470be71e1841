"""One LISTEN loop: a background thread that turns PostgreSQL notifications into wake-ups.

The delivery worker listens on ``authledger_outbox`` and the catch-up runner
on ``authledger_events``; both only need "something may be waiting, look
now", never the payload. A notification is a hint, not a guarantee (one sent
while the connection was down is lost), so the loop wakes its owner once more
each time it starts listening, and the owner still polls on a timer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import psycopg
from sqlalchemy import Engine

from infra.logs import error_line, log_event

NOTIFY_POLL_SECONDS = 1.0  # how often the loop looks at ``stopping`` while no notification comes


def start_listener(
    engine: Engine, channel: str, wake: Callable[[], None], stopping: threading.Event, *,
    retry_seconds: float, log: logging.Logger, name: str | None = None,
) -> threading.Thread:
    """Listen on ``channel`` in a daemon thread, calling ``wake()`` on each notification, until ``stopping``.

    A lost connection is logged and retried every ``retry_seconds``; one lost
    because the owner is shutting down is not worth a line.
    """
    thread = threading.Thread(
        target=_listen, args=(engine, channel, wake, stopping, retry_seconds, log), name=name, daemon=True,
    )
    thread.start()
    return thread


def _listen(
    engine: Engine, channel: str, wake: Callable[[], None], stopping: threading.Event,
    retry_seconds: float, log: logging.Logger,
) -> None:
    # psycopg directly: SQLAlchemy's pool has no use for a connection that only waits.
    # The engine's own connection arguments: a multi-host URL (SQLAlchemy's ``?host=h1:5432&host=h2``) becomes
    # libpq's ``host=h1,h2 port=5432,...`` as it does for the pool.
    _, arguments = engine.dialect.create_connect_args(engine.url)
    while not stopping.is_set():
        try:
            with psycopg.connect(**arguments, autocommit=True) as connection:
                connection.execute(f'LISTEN "{channel}"')
                wake()  # something may have committed while we were not listening
                while not stopping.is_set():
                    for _ in connection.notifies(timeout=NOTIFY_POLL_SECONDS, stop_after=1):
                        wake()
        except psycopg.Error as error:
            if stopping.is_set():
                return
            log_event(log, "listener reconnecting", logging.WARNING, error=error_line(error))
            stopping.wait(retry_seconds)
