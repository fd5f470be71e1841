"""A decision's statements run on cached generic plans, so a plan must not depend on the log staying small.

PostgreSQL keeps a generic plan until autovacuum's next ANALYZE of the
tables it reads. A read that found the requests' events by a hash join over
the whole of ``events`` (the plan chosen for a log of a few hundred events)
went on scanning it as the log grew: 7.3 ms a read in bench/api.py.
"""

from __future__ import annotations

import re

from sqlalchemy import Engine, TextClause, text

from infra.eventlog.postgres import APPEND_TO_ONE_STREAM
from infra.eventlog.queries import decision_read
from infra.projector.snapshots import PERSONAL
from tests.support.traffic import delivered_emails


def generic_plan(engine: Engine, statement: TextClause) -> str:
    """EXPLAIN (GENERIC_PLAN) of ``statement``, its named parameters numbered as PostgreSQL's own."""
    numbers: dict[str, str] = {}
    sql = re.sub(r"(?<!:):(\w+)", lambda m: numbers.setdefault(m.group(1), f"${len(numbers) + 1}"), statement.text)
    with engine.connect() as connection:
        return "\n".join(connection.execute(text("EXPLAIN (GENERIC_PLAN) " + sql.replace(":", r"\:"))).scalars())


def test_on_a_small_log_a_decisions_read_and_append_still_find_events_through_an_index(
    engine: Engine, admin_engine: Engine
) -> None:
    with engine.begin() as connection:
        delivered_emails(connection, 300)
    with admin_engine.connect() as connection:  # statistics that say: 900 events
        connection.execute(text("ANALYZE events"))
        connection.commit()
    for statement in (decision_read(tuple(PERSONAL), True), APPEND_TO_ONE_STREAM):
        plan = generic_plan(admin_engine, statement)
        assert "Seq Scan on events" not in plan, plan
