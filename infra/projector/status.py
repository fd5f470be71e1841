"""`projections status`: how far each projection is behind the log, and what holds the horizon back.

Catch-up projections lag by the events after their checkpoint. All of them
(and the sealer) read only below the transaction-id horizon, so one old open
transaction stalls them all, however little it wrote: status names it, with
its age, and warns past a threshold. It also reports the known limit of the
horizon: after a logical restore into a fresh cluster the server's next
transaction id can fall below the log's, and readers would misorder events.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from attrs import asdict, frozen
from sqlalchemy import Connection, Engine, Table, text

from infra.projector.appliers import qualified_name
from infra.projector.catchup import read_checkpoint
from infra.eventlog.queries import horizon_state, lag_after
from infra.projector.registry import all_projections

# backend_xid: the transaction has written and so holds the horizon back.
# Prepared transactions hold it too, with no session to show.
OLDEST_OPEN = text("""
    SELECT * FROM (
        SELECT pid, backend_xid::text AS xid, extract(epoch FROM now() - xact_start) AS age_seconds,
               state, application_name, usename::text AS user_name, left(query, 200) AS query
          FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()
        UNION ALL
        SELECT NULL, transaction::text, extract(epoch FROM now() - prepared), 'prepared', gid, owner::text, NULL
          FROM pg_prepared_xacts
    ) open ORDER BY age_seconds DESC NULLS LAST LIMIT 1
""")
# Counting is exact up to this many rows (a bounded scan, cheap); past it the
# planner's estimate is shown, labelled, and never below what was counted.
EXACT_COUNT_LIMIT = 100_000
ESTIMATED_ROWS = text("SELECT CAST(greatest(reltuples, 0) AS bigint) FROM pg_class WHERE oid = to_regclass(:table)")
SHADOWS = text("""
    SELECT relname FROM pg_class
     WHERE relname LIKE '%\\_shadow' AND relkind = 'r' AND relpersistence = 'p'
       AND relnamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
     ORDER BY relname
""")


@frozen
class ProjectionState:
    name: str
    kind: str
    tables: list[str]
    rows: int
    rows_exact: bool  # False: the planner's estimate, for a table past EXACT_COUNT_LIMIT rows
    # Catch-up projections only:
    checkpoint: dict[str, int] | None = None
    events_applied: int | None = None
    updated_at: datetime | None = None
    lag_events: int = 0
    lag_seconds: float = 0.0


@frozen
class OpenTransaction:
    pid: int | None
    xid: str
    age_seconds: float
    state: str | None
    application_name: str | None
    user_name: str | None
    query: str | None


@frozen
class Status:
    projections: list[ProjectionState]
    horizon: int
    next_xid: int
    events_held_back: int  # committed at or above the horizon: no catch-up reader may read them yet
    oldest_open_transaction: OpenTransaction | None
    warnings: list[str]
    leftover_shadows: list[str]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def row_count(connection: Connection, table: Table, limit: int = EXACT_COUNT_LIMIT) -> tuple[int, bool]:
    """(rows, exact): counted up to ``limit``, else the planner's estimate (never below what was counted)."""
    name = qualified_name(table)
    bounded = text(f"SELECT count(*) FROM (SELECT FROM {name} LIMIT :past) AS some_rows")
    counted = connection.execute(bounded, {"past": limit + 1}).scalar_one()
    if counted <= limit:
        return counted, True
    estimate = connection.execute(ESTIMATED_ROWS, {"table": name}).scalar() or 0
    return max(estimate, counted), False


def _projection_state(connection: Connection, projection: Any) -> ProjectionState:
    counts = [row_count(connection, t) for t in projection.tables]
    rows, exact = sum(n for n, _ in counts), all(e for _, e in counts)
    state = ProjectionState(projection.name, projection.kind, [t.name for t in projection.tables], rows, exact)
    if not projection.catches_up:
        return state
    stored = read_checkpoint(connection, projection.name)
    lag = lag_after(connection, stored.checkpoint)
    return ProjectionState(
        state.name, state.kind, state.tables, rows, exact,
        {"transaction_id": stored.checkpoint.transaction_id, "global_position": stored.checkpoint.global_position},
        stored.events_applied, stored.updated_at, lag.events, round(float(lag.seconds or 0.0), 3),
    )


def projection_status(admin: Engine, *, warn_after_seconds: float = 60.0) -> Status:
    """Every projection's checkpoint and lag, the horizon, and the transaction holding it back."""
    with admin.connect() as connection:
        states = [_projection_state(connection, p) for p in all_projections()]
        horizon = horizon_state(connection)
        oldest = connection.execute(OLDEST_OPEN).first()
        shadows = list(connection.execute(SHADOWS).scalars())
    open_tx = OpenTransaction(oldest.pid, oldest.xid, round(float(oldest.age_seconds or 0), 3), oldest.state,
                              oldest.application_name, oldest.user_name, oldest.query) if oldest else None
    warnings = []
    if open_tx is not None and open_tx.age_seconds > warn_after_seconds:
        who = f"pid {open_tx.pid}" if open_tx.pid is not None else f"prepared transaction {open_tx.application_name!r}"
        warnings.append(
            f"transaction {open_tx.xid} ({who}, {open_tx.state}) has been open for {open_tx.age_seconds:.0f} s: "
            f"catch-up projections and the sealer cannot read past it ({horizon.events_held_back} events wait)"
        )
    highest = int(horizon.highest_logged) if horizon.highest_logged is not None else None
    if highest is not None and highest >= int(horizon.next_xid):
        warnings.append(
            f"the server's next transaction id ({horizon.next_xid}) is not above the highest in the log ({highest}): "
            "a logical restore into a fresh cluster? Readers would misorder new events; see `authledger db check`"
        )
    warnings += [f"leftover shadow table {name} (an interrupted rebuild; the next rebuild drops it)"
                 for name in shadows]
    return Status(states, int(horizon.horizon), int(horizon.next_xid), horizon.events_held_back, open_tx,
                  warnings, shadows)


def render_status(status: Status) -> str:
    """The status as a table, then the horizon, then any warnings."""
    rows = [("projection", "kind", "checkpoint (xid, position)", "lag events", "lag s", "rows")]
    for p in status.projections:
        checkpoint = f"({p.checkpoint['transaction_id']}, {p.checkpoint['global_position']})" if p.checkpoint else "-"
        lag = (str(p.lag_events), f"{p.lag_seconds:.1f}") if p.kind == "catch-up" else ("0", "-")
        rows.append((p.name, p.kind, checkpoint, *lag, str(p.rows) if p.rows_exact else f"~{p.rows} (estimate)"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.append(f"horizon: transaction {status.horizon} (next {status.next_xid}); "
                 f"{status.events_held_back} committed events wait behind it")
    oldest = status.oldest_open_transaction
    if oldest is None:
        lines.append("oldest open transaction: none holds the horizon back")
    else:
        who = f"pid {oldest.pid}" if oldest.pid is not None else "prepared"
        lines.append(f"oldest open transaction: {oldest.xid} ({who}, {oldest.state}, "
                     f"{oldest.application_name or 'no application name'}), open {oldest.age_seconds:.1f} s")
    lines += [f"warning: {warning}" for warning in status.warnings]
    return "\n".join(lines)
