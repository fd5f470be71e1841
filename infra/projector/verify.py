"""`projections verify`: rebuild to the side and compare with the live tables, row by row.

No lock on the live tables is needed. One repeatable-read transaction
(the reader) fixes a snapshot of the log and of the live tables together:

- an inline projection is written in the same transaction as its events, so
  in that snapshot it must equal the fold of every event the snapshot sees;
- a catch-up projection stores its checkpoint with its rows, so in that
  snapshot it must equal the fold of the log up to its checkpoint, and its
  count of events applied must equal the number of those events.

The fold goes into temporary tables on a second connection, committed page
by page; then both sides are read in primary-key order and merged, so memory
stays flat however large the tables are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from attrs import frozen
from sqlalchemy import Connection, Engine, Table, Text, text

from domain.log import Checkpoint
from infra.projector.catchup import read_checkpoint
from infra.eventlog.reader import COMMITTED, count_events, pages, upto
from infra.projector.appliers import bulk_folding, qualified_name
from infra.projector.locks import projection_lock
from infra.projector.registry import Projection
from infra.projector.shadow import Shadow, create_like, drop, shadow_of
from projections.row_diff import RowDifference, diff_rows

Progress = Callable[[int], None]


@frozen
class VerifyReport:
    projection: str
    events: int  # folded into the side tables
    rows: int  # rows compared: each key once, whichever side (or both) holds it
    differences: list[RowDifference]  # the first ``limit`` of them
    difference_count: int
    problems: list[str]  # differences that are not about one row (a checkpoint's count)

    @property
    def ok(self) -> bool:
        return not self.difference_count and not self.problems

    def summary(self) -> str:
        if self.ok:
            return f"{self.projection}: ok, equal to a replay of {self.events} events ({self.rows} rows compared)"
        lines = [f"{self.projection}: DIFFERS from a replay of {self.events} events: "
                 f"{self.difference_count} differing rows"]
        lines += [f"  {problem}" for problem in self.problems]
        lines += [f"  {difference.describe()}" for difference in self.differences]
        if self.difference_count > len(self.differences):
            lines.append(f"  ... and {self.difference_count - len(self.differences)} more")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {
            "projection": self.projection, "ok": self.ok, "events": self.events, "rows": self.rows,
            "difference_count": self.difference_count, "problems": self.problems,
            "differences": [d.as_dict() for d in self.differences],
        }


def _ordered(connection: Connection, table: Table, keys: list[str]) -> Iterator[dict[str, Any]]:
    quote = connection.dialect.identifier_preparer.quote
    order = ", ".join(quote(k) + (' COLLATE "C"' if isinstance(table.c[k].type, Text) else "") for k in keys)
    names = ", ".join(quote(c.name) for c in table.columns)
    query = text(f"SELECT {names} FROM {qualified_name(table)} ORDER BY {order}")
    for row in connection.execute(query.execution_options(stream_results=True, yield_per=2000)):
        yield dict(row._mapping)


def verify(
    admin: Engine, projection: Projection, *, batch_size: int = 5000, progress: Progress | None = None,
    limit: int = 100,
) -> VerifyReport:
    """Compare ``projection`` with a replay of the log; the first ``limit`` differences are kept."""
    # Temporary tables, named with their schema so that nothing outside it is ever touched.
    shadows = [shadow_of(table, f"verify_{table.name}", schema="pg_temp") for table in projection.tables]
    with admin.connect() as builder, projection_lock(builder, projection.name, "verify"), \
            admin.connect().execution_options(isolation_level="REPEATABLE READ") as reader, bulk_folding():
        try:
            return _verify(builder, reader, projection, shadows, batch_size, progress, limit)
        finally:
            builder.rollback()
            for shadow in shadows:  # the pool keeps the session, and its temporary tables with it
                drop(builder, shadow)
            builder.commit()


def _verify(
    builder: Connection, reader: Connection, projection: Projection, shadows: list[Shadow], batch_size: int,
    progress: Progress | None, limit: int,
) -> VerifyReport:
    for shadow in shadows:
        create_like(builder, shadow, temporary=True)
    builder.commit()
    problems, bound = [], COMMITTED
    if projection.catches_up:
        stored = read_checkpoint(reader, projection.name)  # this statement takes the snapshot
        bound = upto(stored.checkpoint)
        logged = count_events(reader, Checkpoint(), bound)
        if stored.events_applied != logged:
            problems.append(f"the checkpoint counts {stored.events_applied} events applied, but the log "
                            f"holds {logged} up to it: a batch was applied twice or lost")
    else:
        reader.execute(text(f"SELECT FROM {qualified_name(shadows[0].live)} LIMIT 0"))  # the snapshot
    applier = projection.applier.on({s.live.name: s.shadow for s in shadows}, cache_rows=20_000)
    events = 0
    for page in pages(reader, Checkpoint(), bound, batch_size, projection.reading):
        applier.apply(builder, page)
        builder.commit()
        events += len(page)
        if progress is not None:
            progress(len(page))
    differences: list[RowDifference] = []
    count, rows = 0, 0
    for shadow in shadows:
        keys = [c.name for c in shadow.live.primary_key.columns]
        live, replay = _ordered(reader, shadow.live, keys), _counted(_ordered(builder, shadow.shadow, keys))
        only_live = 0
        for difference in diff_rows(shadow.live.name, keys, live, replay):
            count += 1
            only_live += difference.kind == "unexpected"
            if len(differences) < limit:
                differences.append(difference)
        rows += replay.seen + only_live  # a key on both sides is one row compared
    return VerifyReport(projection.name, events, rows, differences, count, problems)


class _counted:
    """An iterator that counts what went through it."""

    def __init__(self, rows: Iterator[dict[str, Any]]) -> None:
        self.rows, self.seen = rows, 0

    def __iter__(self) -> _counted:
        return self

    def __next__(self) -> dict[str, Any]:
        row = next(self.rows)
        self.seen += 1
        return row
