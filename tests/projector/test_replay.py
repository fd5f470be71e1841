"""`projections replay --as-of | --to-position`: the state observed then, rebuilt now into a side schema."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import Engine, text

from domain.errors import InvalidInput
from infra.errors import ReplayTargetExists
from infra.projector.catchup import catch_up
from infra.clock import ManualClock
from infra.eventlog.reader import as_of, to_position
from infra.projector.registry import all_projections
from infra.projector.replay import drop_replay, replay_into
from infra.services.unit_of_work import ServiceContext
from tests.support.traffic import some_traffic


def observed(engine: Engine, schema: str = "public") -> dict[str, list[Any]]:
    """Every projection table's rows, sorted, as seen now."""
    tables = {}
    with engine.connect() as connection:
        for projection in all_projections():
            for table in projection.tables:
                rows = connection.execute(text(f"SELECT * FROM {schema}.{table.name}"))
                tables[table.name] = sorted(tuple(str(v) for v in row) for row in rows)
    return tables


def test_replay_as_of_a_moment_reproduces_what_was_observed_then(
    ctx: ServiceContext, clock: ManualClock, engine: Engine, admin_engine: Engine
) -> None:
    some_traffic(ctx, clock)
    catch_up(engine)
    with engine.connect() as connection:
        moment = connection.execute(text("SELECT clock_timestamp()")).scalar_one()
        position = connection.execute(text("SELECT max(global_position) FROM events")).scalar_one()
    then = observed(engine)
    time.sleep(0.01)
    clock.advance(3600)
    some_traffic(ctx, clock)  # supersedes, sends and counts more: the live tables move on
    catch_up(engine)
    assert observed(engine) != then

    for projection in all_projections():
        replay_into(admin_engine, projection, "as_of_then", as_of(moment))
        replay_into(admin_engine, projection, "at_position", to_position(position))

    assert observed(admin_engine, "as_of_then") == then
    assert observed(admin_engine, "at_position") == then
    drop_replay(admin_engine, "as_of_then")
    drop_replay(admin_engine, "at_position")
    with admin_engine.connect() as connection:
        assert connection.execute(text("SELECT to_regnamespace('as_of_then')")).scalar() is None


def test_replay_refuses_a_schema_it_did_not_make(admin_engine: Engine) -> None:
    with admin_engine.begin() as connection:
        connection.execute(text("CREATE SCHEMA reports"))
    [outbox] = [p for p in all_projections() if p.name == "email_outbox"]
    with pytest.raises(ReplayTargetExists, match="was not made by authledger replay"):
        replay_into(admin_engine, outbox, "reports", to_position(1))
    with pytest.raises(InvalidInput, match="was not made by authledger replay"):
        drop_replay(admin_engine, "reports")
    with pytest.raises(InvalidInput, match="not a usable replay schema name"):
        drop_replay(admin_engine, 'x"; DROP TABLE events; --')
