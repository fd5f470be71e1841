"""Rebuilding a projection from the log while traffic runs.

1. Create shadow tables shaped like the live ones (``infra.projector.shadow``).
2. Fold the log into them below the transaction-id horizon, one committed
   transaction per page, so the rebuild never holds the horizon back.
3. Catch up again until a page comes back short, then swap in one short
   transaction:
   - inline projections: ``LOCK ... IN ACCESS EXCLUSIVE MODE`` on the live
     tables (the projection's readers and writers wait), fold what committed
     since the last page, drop the live tables, rename the shadows in;
   - catch-up projections: lock the checkpoint row (the runner skips it
     meanwhile), fold up to the horizon, swap, and store the shadow's
     checkpoint with the tables.
   The swap waits at most ``lock_timeout`` for its locks; if it cannot get
   them it rolls back and tries again, so that writers never queue behind a
   rebuild waiting on some long reader.

A rebuild that fails or is interrupted at any point before the swap commits
leaves the live tables as they were; its shadow tables are dropped (or, after
a SIGKILL, by the next rebuild).

Why the lock is enough for inline projections: every writer of an inline
table appends its events and writes the table in one transaction, so once
the lock is granted every transaction that touched the table has committed,
and everything they appended is visible to the final catch-up. A writer that
appended but has not reached the table yet is not visible, and will apply
its events to the new table after the swap.

Why ACCESS EXCLUSIVE from the start, not EXCLUSIVE and then the DROP's:
decisions read some of these tables before they write them (a snapshot, its
older requests, a receipt, a link's request), in one transaction. Holding
EXCLUSIVE, the swap's DROP would wait for such a reader while the reader's
write waits for the swap: a deadlock, one of them cancelled. Asked for whole
at once, PostgreSQL lets a waiting reader that already holds the table go
ahead of the swap, which then waits for its commit.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from attrs import frozen
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import OperationalError

from infra.errors import ProjectionBusy
from domain.log import Checkpoint
from infra.eventlog.reader import COMMITTED, FOLDING, HORIZON, LogBound, Reading, count_events, read_page
from infra.projector.appliers import Applier, bulk_folding
from infra.projector.locks import projection_lock
from infra.projector.registry import Projection
from infra.projector.shadow import Shadow, analyze, copy_grants, create_like, drop, index_renames, shadow_of, swap

Progress = Callable[[int], None]
CACHE_ROWS = 20_000
LOCK_NOT_AVAILABLE = "55P03"

LOCK_CHECKPOINT = text("""
    SELECT events_applied FROM projection_checkpoints WHERE projection = :name FOR UPDATE
""")
STORE_CHECKPOINT = text("""
    INSERT INTO projection_checkpoints (projection, transaction_id, global_position, events_applied, updated_at)
    VALUES (:name, CAST(:tx AS text)::xid8, :pos, :applied, now())
    ON CONFLICT (projection) DO UPDATE
       SET transaction_id = EXCLUDED.transaction_id, global_position = EXCLUDED.global_position,
           events_applied = EXCLUDED.events_applied, updated_at = EXCLUDED.updated_at
""")


@frozen
class RebuildResult:
    projection: str
    events: int  # folded into the new tables
    seconds: float
    swap_seconds: float  # how long the projection's writers were held back
    swap_attempts: int
    checkpoint: Checkpoint

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


@frozen
class Built:
    checkpoint: Checkpoint
    events: int


def fold_pages(
    connection: Connection, applier: Applier, after: Checkpoint, bound: LogBound, batch_size: int,
    progress: Progress | None = None, *, commit: bool = True, reading: Reading = FOLDING,
) -> Built:
    """Fold pages until a short one; with ``commit`` each page is its own transaction."""
    events = 0
    while True:
        page = read_page(connection, after, bound, batch_size, reading=reading)
        try:
            if page:
                applier.apply(connection, page)
            if commit:
                connection.commit()
        except BaseException:
            applier.forget()
            raise
        if page:
            after, events = page[-1].checkpoint, events + len(page)
            if progress is not None:
                progress(len(page))
        if len(page) < batch_size:
            return Built(after, events)


def log_length(engine: Engine, projection: Projection) -> int:
    """The events a rebuild or verify of ``projection`` will fold, give or take new traffic."""
    with engine.connect() as connection:
        return count_events(connection, Checkpoint(), HORIZON, projection.reading)


def rebuild(
    admin: Engine, projection: Projection, *, batch_size: int = 5000, progress: Progress | None = None,
    lock_timeout: float = 2.0, swap_attempts: int = 10,
) -> RebuildResult:
    """Rebuild ``projection`` from the log into shadow tables and swap them in (see the module doc)."""
    started = time.monotonic()
    shadows = [shadow_of(table) for table in projection.tables]
    with admin.connect() as connection, projection_lock(connection, projection.name, "rebuild"), \
            bulk_folding():
        try:
            for shadow in shadows:
                create_like(connection, shadow)
                copy_grants(connection, shadow)
            connection.commit()
            applier = projection.applier.on({s.live.name: s.shadow for s in shadows}, cache_rows=CACHE_ROWS)
            reading = projection.reading
            built = fold_pages(connection, applier, Checkpoint(), HORIZON, batch_size, progress, reading=reading)
            for shadow in shadows:
                analyze(connection, shadow)
            renames = {s.live.name: index_renames(connection, s) for s in shadows}
            connection.commit()
            for attempt in range(1, swap_attempts + 1):
                # Catch up outside any lock first, so the locked part has little left to do.
                more = fold_pages(connection, applier, built.checkpoint, HORIZON, batch_size, progress,
                                  reading=reading)
                built = Built(more.checkpoint, built.events + more.events)
                try:
                    held, final = _swap(connection, projection, shadows, renames, applier, built, batch_size,
                                        lock_timeout)
                except OperationalError as error:
                    connection.rollback()
                    applier.forget()
                    if getattr(error.orig, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                        raise
                    continue
                if progress is not None:
                    progress(final.events - built.events)
                return RebuildResult(projection.name, final.events, time.monotonic() - started, held, attempt,
                                     final.checkpoint)
            raise ProjectionBusy(
                f"could not lock {projection.name} for the swap within {lock_timeout:g} s in {swap_attempts} "
                "attempts (long transactions on its tables?); the live tables are unchanged"
            )
        finally:
            _drop_quietly(connection, shadows)


def _swap(
    connection: Connection, projection: Projection, shadows: list[Shadow], renames: dict[str, list[tuple[str, str]]],
    applier: Applier, built: Built, batch_size: int, lock_timeout: float,
) -> tuple[float, Built]:
    """The one short transaction: lock, fold the rest, swap; (seconds the lock was held, final state)."""
    connection.execute(text(f"SET LOCAL lock_timeout = {int(lock_timeout * 1000)}"))
    if projection.catches_up:
        connection.execute(LOCK_CHECKPOINT, {"name": projection.name})
        locked = time.monotonic()
        rest = fold_pages(connection, applier, built.checkpoint, HORIZON, batch_size, commit=False,
                          reading=projection.reading)
    else:
        names = ", ".join(connection.dialect.identifier_preparer.format_table(s.live) for s in shadows)
        connection.execute(text(f"LOCK TABLE {names} IN ACCESS EXCLUSIVE MODE"))
        locked = time.monotonic()
        rest = fold_pages(connection, applier, built.checkpoint, COMMITTED, batch_size, commit=False,
                          reading=projection.reading)
    final = Built(rest.checkpoint, built.events + rest.events)
    for shadow in shadows:
        swap(connection, shadow, renames[shadow.live.name])
    if projection.catches_up:
        connection.execute(STORE_CHECKPOINT, {
            "name": projection.name, "tx": str(final.checkpoint.transaction_id),
            "pos": final.checkpoint.global_position, "applied": final.events,
        })
    connection.commit()
    return time.monotonic() - locked, final


def _drop_quietly(connection: Connection, shadows: list[Shadow]) -> None:
    """Drop what is left of the shadows; never hide the error that got us here."""
    try:
        connection.rollback()
        for shadow in shadows:
            drop(connection, shadow)
        connection.commit()
    except Exception:  # noqa: BLE001 - the next rebuild drops leftovers before it starts
        pass
