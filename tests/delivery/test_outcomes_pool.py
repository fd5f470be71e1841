"""The worker appends its claims and its outcomes on connections of their own.

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

from sqlalchemy import Engine, event

from domain.reset import RequestReset
from infra.db.engine import Database
from infra.delivery.worker import Worker
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log

SENDER = "authledger <no-reply@app.test>"
CLAIM, RECORD = "WITH RECURSIVE tenants", "WITH recorded AS"


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
