"""A NOTIFY lost with the LISTEN connection (a failover drops it) strands no message."""

from __future__ import annotations

import logging
import threading

import pytest
from sqlalchemy import Engine, text

from domain.reset import RequestReset
from infra.delivery.worker import Worker
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.support.mailers import RecordingMailer
from tests.support.waiting import listening, wait_until

CHANNEL = "authledger_outbox"
CUT_OFF = text("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
               "WHERE datname = current_database() AND query = :listen")


def test_a_message_queued_while_the_listener_was_cut_off_is_still_claimed_and_the_listener_listens_again(
    ctx: ServiceContext, admin_engine: Engine, caplog: pytest.LogCaptureFixture,
) -> None:
    mailer = RecordingMailer()
    worker = Worker(ctx, mailer, sender="a@app.test", poll_seconds=0.5)
    delivering = threading.Thread(target=worker.run)
    delivering.start()
    try:
        wait_until(lambda: listening(admin_engine, CHANNEL), what="the worker to listen")
        with admin_engine.connect() as connection:
            cut = connection.execute(CUT_OFF, {"listen": f'LISTEN "{CHANNEL}"'}).scalars().all()
        assert cut == [True]
        # Its NOTIFY reaches no one: the listener's connection is gone.
        outcome = request_reset(ctx, RequestReset("ada", "ada@example.test"))

        wait_until(lambda: [e for e in mailer.emails if e.message_id == outcome.message_id],
                   what="the message queued meanwhile to be claimed and sent")
        wait_until(lambda: listening(admin_engine, CHANNEL), what="the listener to listen again")
    finally:
        worker.stop()
        delivering.join(timeout=15)

    assert [e.message_id for e in mailer.emails] == [outcome.message_id]
    assert "listener reconnecting" in [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
