"""The one LISTEN helper: a notification wakes its owner, and it stops when told to."""

from __future__ import annotations

import logging
import threading

from sqlalchemy import Engine, text

from infra.db.listen import start_listener

log = logging.getLogger("authledger.test")


def test_a_notification_wakes_the_owner_and_stopping_ends_the_thread(engine: Engine) -> None:
    woken, stopping = threading.Event(), threading.Event()
    listening = threading.Event()

    def wake() -> None:
        if listening.is_set():
            woken.set()
        listening.set()  # the first wake-up says the LISTEN is in place

    listener = start_listener(engine, "authledger_test", wake, stopping, retry_seconds=0.1, log=log)
    assert listening.wait(10), "woken once on connecting: something may have committed meanwhile"
    with engine.begin() as connection:
        connection.execute(text("NOTIFY authledger_test"))
    assert woken.wait(10)

    stopping.set()
    listener.join(timeout=5)
    assert not listener.is_alive()
