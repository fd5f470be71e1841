"""serve's closed-counts writer: a database it cannot reach is logged and tried again, never the end of the loop."""

from __future__ import annotations

import logging
import threading

import pytest
from sqlalchemy import create_engine

from infra.logs import FIELDS
from infra.services.closed_counts import ClosedCountsWriter
from infra.services.unit_of_work import ServiceContext
from tests.support.keys import TEST_KEYS
from tests.support.servers import free_port
from tests.support.waiting import wait_until


def test_the_writer_logs_a_database_it_cannot_reach_keeps_trying_and_stops_when_told(
    caplog: pytest.LogCaptureFixture,
) -> None:
    nowhere = create_engine(f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/none",
                            connect_args={"connect_timeout": 2})
    writer = ClosedCountsWriter(ServiceContext(engine=nowhere, keys=TEST_KEYS), interval_seconds=0.05)
    caplog.set_level(logging.ERROR, logger="authledger.counts")
    thread = threading.Thread(target=writer.run)
    thread.start()
    try:
        failures = wait_until(lambda: (
            found if len(found := [r for r in caplog.records if r.message.startswith("writing closed counts failed")])
            >= 2 else None), what="two failed passes")
    finally:
        writer.stop()
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert all(getattr(r, FIELDS)["error"].startswith("OperationalError: ") for r in failures)
    nowhere.dispose()
