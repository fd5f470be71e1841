"""A worker thread caught by a database outage between claiming a batch and sending it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from uuid import UUID

import pytest

from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from domain.email import LeaseClaimed, ProviderAccepted
from domain.reset import RequestReset
from infra.db.engine import Database
from infra.delivery.leases import Claim
from infra.delivery.worker import Worker
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.support.log_reading import stream_events
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log
from tests.support.waiting import wait_until


def _refuse_connections(server: Engine, name: str, refuse: bool) -> None:
    """Close ``name`` to new sessions and end its open ones, as a server going down does; or reopen it."""
    with server.connect() as connection:
        connection.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(not refuse).lower()}'))
        if refuse:
            connection.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :name"), {"name": name}
            )


class _OutageRightAfterClaiming(Worker):
    """The database goes away once, just after this worker's first claim committed."""

    def __init__(self, *args: object, server: Engine, database_name: str, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.server, self.database_name = server, database_name
        self.outage_began = threading.Event()

    def claim(self, owner: str, limit: int) -> list[Claim]:
        claims = super().claim(owner, limit)
        if claims and not self.outage_began.is_set():
            _refuse_connections(self.server, self.database_name, refuse=True)
            self.outage_began.set()
        return claims


def deliver_through_outage(ctx: ServiceContext, database: Database, pg_server: Engine, *,
                           back_after: Callable[[], object]) -> RecordingMailer:
    """A worker that claims a reset's email just as the database goes away; the database comes back once
    ``back_after()`` holds; the mailer, once the email is sent. The test's clock stands still, so the lease
    never runs out: only the worker taking its batch up again can deliver the message."""
    name = make_url(database.url).database
    mailer = RecordingMailer()
    worker = _OutageRightAfterClaiming(
        ctx, mailer, sender="a@app.test", poll_seconds=0.1, server=pg_server, database_name=name
    )
    delivering = threading.Thread(target=worker.run)
    delivering.start()
    try:
        assert worker.outage_began.wait(timeout=30)
        wait_until(back_after, what="the worker to meet the outage")
        _refuse_connections(pg_server, name, refuse=False)
        wait_until(lambda: mailer.emails, what="the email to be sent once the database is back")
    finally:
        _refuse_connections(pg_server, name, refuse=False)
        worker.stop()
        delivering.join(timeout=15)
    return mailer


def assert_sent_once_on_its_first_lease(engine: Engine, mailer: RecordingMailer, message_id: UUID) -> None:
    assert [e.message_id for e in mailer.emails] == [message_id]
    assert mailer.calls[str(message_id)] == 1
    trail = [type(e) for e in stream_events(engine, f"email:{message_id}")]
    assert trail[1:] == [LeaseClaimed, ProviderAccepted], "sent on its first lease, not after it ran out"
    assert_projections_match_log(engine)


def test_a_batch_claimed_just_before_the_database_went_away_is_sent_once_it_is_back(
    ctx: ServiceContext, engine: Engine, database: Database, pg_server: Engine
) -> None:
    request = request_reset(ctx, RequestReset("42", "ada@example.test"))

    mailer = deliver_through_outage(ctx, database, pg_server, back_after=lambda: True)

    assert_sent_once_on_its_first_lease(engine, mailer, request.message_id)


def test_a_batch_whose_take_back_meets_the_outage_too_is_still_sent_once_the_database_is_back(
    ctx: ServiceContext, engine: Engine, database: Database, pg_server: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    # The database stays away until the worker has also failed to take its batch back (its second failed
    # iteration): the batch must survive that failure, not only the first read's.
    request = request_reset(ctx, RequestReset("42", "ada@example.test"))

    def failed_twice() -> bool:
        return sum(1 for r in caplog.records if r.getMessage() == "worker iteration failed") >= 2

    with caplog.at_level(logging.ERROR, logger="authledger.worker"):
        mailer = deliver_through_outage(ctx, database, pg_server, back_after=failed_twice)

    assert_sent_once_on_its_first_lease(engine, mailer, request.message_id)
