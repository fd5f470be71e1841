"""Every inline projection must equal a fresh replay of the log.

Used by scenario tests after they run: it folds the whole log through each
projection's pure ``evolve`` and compares row by row with the live table.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from domain.log import Checkpoint
from infra.inline_projections import INLINE
from infra.postgres_store import PostgresEventStore


def replayed_rows(engine: Engine) -> dict[str, dict[Any, Any]]:
    with engine.connect() as connection:
        store, checkpoint, events = PostgresEventStore(connection), Checkpoint(), []
        while page := store.read_all(after=checkpoint, limit=5000):
            events += page
            checkpoint = page[-1].checkpoint
    # The horizon order is commit order across streams; within a stream it is version order.
    tables: dict[str, dict[Any, Any]] = {}
    for projection in INLINE:
        rows: dict[Any, Any] = {}
        for recorded in events:
            key = projection.key_of(recorded.event)
            if key is not None:
                row = projection.evolve(rows.get(key), recorded.event)
                if row is not None:
                    rows[key] = row
        tables[projection.name] = rows
    return tables


def live_rows(engine: Engine) -> dict[str, dict[Any, Any]]:
    with engine.connect() as connection:
        return {p.name: p.load(connection, _all_keys(connection, p), lock=False) for p in INLINE}


def _all_keys(connection: Any, projection: Any) -> list[Any]:
    from sqlalchemy import select

    return list(connection.execute(select(projection.table.c[projection.key_column])).scalars())


def assert_projections_match_log(engine: Engine) -> None:
    replayed, live = replayed_rows(engine), live_rows(engine)
    for name in replayed:
        assert live[name] == replayed[name], f"{name} differs from a replay of the log"
