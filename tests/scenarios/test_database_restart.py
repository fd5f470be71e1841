"""The database goes away under load and comes back: 503s meanwhile, nothing committed lost, workers carry on."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from infra.errors import DatabaseUnavailable
from domain.delivery import DeliveryPolicy
from domain.policy import ResetPolicy
from domain.reset import RequestReset
from infra.db.engine import Database
from infra.db.embedded import start_embedded, stop_embedded
from infra.services.clients import create_client
from infra.services.reset import request_reset
from infra.db.schema import init_schema
from infra.services.unit_of_work import ServiceContext
from infra.delivery.worker import Worker
from tests.conftest import ROOMY_SEND_LIMITS
from tests.support.keys import TEST_KEYS
from tests.http.support import asgi_client
from tests.support.mailers import RecordingMailer
from tests.support.pg_control import start_server, stop_server
from tests.support.replay import assert_projections_match_log
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def own_server() -> Iterator[tuple[Path, Database]]:
    """A server of this test's own, so that stopping it disturbs no other test."""
    data_dir = Path(tempfile.mkdtemp(prefix="authledger-outage-"))
    url = start_embedded(data_dir).replace("postgresql://", "postgresql+psycopg://", 1)
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text("CREATE DATABASE outage"))
    admin.dispose()
    database = Database(url.replace("/postgres?", "/outage?"))
    engine = database.admin_engine()
    init_schema(engine)
    engine.dispose()
    yield data_dir, database
    stop_embedded(data_dir)
    shutil.rmtree(data_dir, ignore_errors=True)


def _story_of(database: Database, message_ids: set[str]) -> str:
    """What the log says of messages that were not sent: the first thing to read when this fails."""
    engine = database.admin_engine()
    with engine.connect() as connection:
        rows = connection.execute(text(
            "SELECT stream_id, event_type, recorded_at, payload FROM events WHERE stream_id = ANY(:s) "
            "ORDER BY global_position"), {"s": [f"email:{m}" for m in message_ids]}).all()
    engine.dispose()
    return "not sent:\n" + "\n".join(f"  {r.stream_id} {r.event_type} {r.recorded_at} {r.payload}" for r in rows)


async def post_reset(ctx: ServiceContext, api_key: str) -> httpx.Response:
    async with asgi_client(ctx, api_key) as client:
        return await client.post("/v1/password-resets", json={"user_id": "7", "email": "o@example.test"},
                                 headers={"Idempotency-Key": "during-outage"})


def test_a_restart_under_load_loses_nothing_committed(own_server: tuple[Path, Database]) -> None:
    data_dir, database = own_server
    engine = database.engine(pool_size=4)
    # A claim whose COMMIT the server made just as it went down never reaches
    # the worker, which cannot know it holds those leases: the messages wait
    # for the lease to run out, as they should. A short lease lets that
    # recovery happen within the test's wait.
    ctx = ServiceContext(engine=engine, keys=TEST_KEYS, reset_policy=ResetPolicy(hourly_limit=1000),
                         send_limits=ROOMY_SEND_LIMITS,
                         delivery_policy=DeliveryPolicy(lease=timedelta(seconds=8), margin=timedelta(seconds=2)))
    api_key = create_client(ctx, "outage").api_key
    mailer = RecordingMailer()
    worker = Worker(ctx, mailer, sender="a@app.test", inflight=8, poll_seconds=0.2)
    delivering = threading.Thread(target=worker.run)
    delivering.start()

    accepted, refused = [], []
    restarted = threading.Event()
    accepted_after_restart = []
    stop_load = threading.Event()

    def load() -> None:
        n = 0
        while not stop_load.is_set():
            n += 1
            try:
                outcome = request_reset(ctx, RequestReset(f"u{n}", f"u{n}@example.test"))
                accepted.append(outcome)
                if restarted.is_set():
                    accepted_after_restart.append(outcome)
            except DatabaseUnavailable:
                refused.append(n)
            time.sleep(0.01)

    producer = threading.Thread(target=load)
    producer.start()
    try:
        wait_until(lambda: len(accepted) >= 20 and mailer.emails, what="requests accepted and emails sent")
        stop_server(data_dir)
        # Refused, not hung (a hang would meet the suite's timeout): the pool's connections are gone and a new
        # one is refused, which is all the service needs to know to answer 503.
        with pytest.raises(DatabaseUnavailable):
            request_reset(ctx, RequestReset("during-outage", "x@example.test"))
        response = asyncio.run(post_reset(ctx, api_key))
        assert response.status_code == 503, response.text
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["type"] == "urn:authledger:problem:database-unavailable"
        wait_until(lambda: len(refused) >= 3, what="the load to meet the outage")
        start_server(data_dir)
        restarted.set()
        wait_until(lambda: len(accepted_after_restart) >= 20, what="requests accepted after the restart")
    finally:
        stop_load.set()
        producer.join()

    # A request refused with a 503 may still have committed (the server can
    # go down between its COMMIT and the answer): wait for what the log holds,
    # by id, not for as many emails as there were acceptances.
    with engine.connect() as connection:
        committed = {str(m) for m in connection.execute(text("SELECT message_id FROM email_outbox")).scalars()}
    try:
        wait_until(lambda: committed <= {str(e.message_id) for e in mailer.emails},
                   what=lambda: _story_of(database, committed - {str(e.message_id) for e in mailer.emails}))
    finally:
        worker.stop()
        delivering.join(timeout=15)

    engine.dispose()

    assert refused, "some requests met the outage"
    assert accepted_after_restart, "requests succeed again once the server is back"
    assert {str(a.message_id) for a in accepted} <= committed
    sent = {str(e.message_id) for e in mailer.emails}
    assert sorted(sent) == sorted(committed), _story_of(database, committed - sent)
    admin = database.admin_engine()
    try:
        assert_projections_match_log(admin)
    finally:
        admin.dispose()
