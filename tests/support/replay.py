"""Every projection must equal a fresh replay of the log: the one check the whole suite uses.

After a scenario, ``assert_projections_match_log`` catches the catch-up
projections up, then, in one repeatable-read snapshot, folds the log in
memory through every registered projection's pure fold (inline and
catch-up alike) and compares the result with the live tables row by row.
A catch-up projection is compared at its own checkpoint, and its count of
events applied must match the log up to there (a double-applied batch shows).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, select

from domain.log import Checkpoint, RecordedEvent
from infra.projector.catchup import catch_up, read_checkpoint
from infra.eventlog.reader import COMMITTED, Reading, pages
from infra.projector.registry import Projection, all_projections
from projections.row_diff import diff_rows, sorted_rows


def _live(connection: Connection, table: Any) -> list[dict[str, Any]]:
    return [dict(row._mapping) for row in connection.execute(select(table))]


def projection_differences(connection: Connection, projection: Projection, log: list[RecordedEvent]) -> list[str]:
    problems = []
    if projection.catches_up:
        stored = read_checkpoint(connection, projection.name)
        log = [r for r in log if r.checkpoint <= stored.checkpoint]
        if stored.events_applied != len(log):
            problems.append(f"{projection.name}: checkpoint counts {stored.events_applied} events applied, "
                            f"the log holds {len(log)} up to it")
    expected = projection.applier.fold(log)
    for table in projection.tables:
        keys = [c.name for c in table.primary_key.columns]
        live, replay = sorted_rows(_live(connection, table), keys), sorted_rows(expected[table.name], keys)
        problems += [d.describe() for d in diff_rows(table.name, keys, live, replay)]
    return problems


def assert_projections_match_log(engine: Engine, *, run_catch_up: bool = True) -> None:
    if run_catch_up:
        catch_up(engine)
    with engine.connect().execution_options(isolation_level="REPEATABLE READ") as connection:
        log = [r for page in pages(connection, Checkpoint(), COMMITTED) for r in page]
        # A fold that reads personal fields (the address index) sees them opened, as its rebuild does.
        opened = ([r for page in pages(connection, Checkpoint(), COMMITTED, reading=Reading(personal_data=True))
                   for r in page] if any(p.personal_data for p in all_projections()) else log)
        problems = [p for projection in all_projections()
                    for p in projection_differences(connection, projection,
                                                    opened if projection.personal_data else log)]
    assert not problems, "projections differ from a replay of the log:\n" + "\n".join(problems[:50])
