"""The worker appends its claims and its outcomes on connections of their own, and ``serve``'s beside the API
on connections apart from the API's.

A connection that appends claims (448 bytes) and outcomes (496) in turn
leaves each page of ``events`` when an outcome does not fit, with room a
claim would fit, and a later batch of claims took that room one old page an
event (bench/RESULTS.md, "Where the room comes from"). Both statements go
through SQLAlchemy's cursor, where they are watched here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pathlib import Path

from sqlalchemy import Engine, event

from domain.reset import RequestReset
from infra.bootstrap import App
from infra.config import Settings
from infra.db.engine import Database
from infra.delivery.worker import Worker
from infra.http.serve import delivery_worker
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log

SENDER = "authledger <no-reply@app.test>"
CLAIM, RECORD = "WITH due AS MATERIALIZED", "WITH recorded AS"


@contextmanager
def statements_on(engine: Engine) -> Iterator[list[str]]:
    """The statements run through ``engine``'s connections during the block."""
    seen: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(" ".join(statement.split()))

    event.listen(engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", note)


def test_claims_go_through_the_services_pool_and_outcomes_through_their_own(
    ctx: ServiceContext, engine: Engine, database: Database
) -> None:
    for n in range(3):
        request_reset(ctx, RequestReset(f"user-{n}", f"u{n}@example.test"))
    outcomes = database.engine(pool_size=2)
    try:
        with statements_on(engine) as on_services, statements_on(outcomes) as on_outcomes:
            tally = Worker(ctx, RecordingMailer(), sender=SENDER, inflight=1, outcomes=outcomes).drain()
    finally:
        outcomes.dispose()

    assert tally == {"sent": 3}
    assert any(s.startswith(CLAIM) for s in on_services) and not any(s.startswith(RECORD) for s in on_services)
    assert any(s.startswith(RECORD) for s in on_outcomes) and not any(s.startswith(CLAIM) for s in on_outcomes)
    assert_projections_match_log(engine)


def test_serves_worker_claims_and_records_on_pools_apart_from_the_apis(database: Database, tmp_path: Path) -> None:
    app = App(Settings(data_dir=tmp_path), database=database)
    try:
        for n in range(3):
            request_reset(app.services, RequestReset(f"user-{n}", f"u{n}@example.test"))
        worker = delivery_worker(app, inflight=2)
        with (statements_on(app.engine) as on_api, statements_on(app.delivery_engine) as on_claims,
              statements_on(app.outcomes_engine) as on_outcomes):
            tally = worker.drain()
        assert_projections_match_log(app.engine)  # the app's engine: it opens with the app's master key
    finally:
        app.close()

    assert tally == {"sent": 3}
    assert not any(s.startswith((CLAIM, RECORD)) for s in on_api)
    assert any(s.startswith(CLAIM) for s in on_claims) and not any(s.startswith(RECORD) for s in on_claims)
    assert any(s.startswith(RECORD) for s in on_outcomes) and not any(s.startswith(CLAIM) for s in on_outcomes)
