"""The catch-up runner: folds the log into the catch-up projections, batch by batch.

Each batch is one transaction: lock the projections' checkpoint rows, read
the next events below the transaction-id horizon once, fold them into each
projection's tables, move the checkpoints. A runner killed mid-batch leaves
nothing behind, and the next one resumes from the last committed
checkpoint: nothing is lost and nothing is counted twice. Two runners never
fold the same batch: the checkpoint row is locked with SKIP LOCKED, so the
second one moves on.

``authledger serve`` starts one in a thread (``CatchUpRunner(engine).run()``
and ``.stop()``); ``authledger projections run`` runs one alone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from datetime import datetime

from attrs import frozen
from sqlalchemy import Connection, Engine, text

from domain.log import Checkpoint
from infra.db.listen import start_listener
from infra.db.reading import reading
from infra.eventlog.reader import COMMITTED, HORIZON, count_events, read_page
from infra.logs import error_line, log_event
from infra.projector.registry import Projection, catch_up_projections

log = logging.getLogger("authledger.catchup")

CHANNEL = "authledger_events"
LOG_EVERY_SECONDS = 10.0

ENSURE_CHECKPOINT = text("INSERT INTO projection_checkpoints (projection) VALUES (:name) ON CONFLICT DO NOTHING")
LOCK_CHECKPOINT = text("""
    SELECT transaction_id::text AS transaction_id, global_position, events_applied
      FROM projection_checkpoints WHERE projection = :name
       FOR UPDATE SKIP LOCKED
""")
READ_CHECKPOINT = text("""
    SELECT transaction_id::text AS transaction_id, global_position, events_applied, updated_at
      FROM projection_checkpoints WHERE projection = :name
""")
ADVANCE = text("""
    UPDATE projection_checkpoints
       SET transaction_id = CAST(:tx AS text)::xid8, global_position = :pos,
           events_applied = events_applied + :applied, updated_at = now()
     WHERE projection = :name
""")


@frozen
class StoredCheckpoint:
    checkpoint: Checkpoint
    events_applied: int
    updated_at: datetime | None = None


def read_checkpoint(connection: Connection, name: str) -> StoredCheckpoint:
    row = connection.execute(READ_CHECKPOINT, {"name": name}).first()
    if row is None:
        return StoredCheckpoint(Checkpoint(), 0)
    return StoredCheckpoint(Checkpoint(int(row.transaction_id), row.global_position), row.events_applied,
                            row.updated_at)


def catch_up_batch(
    connection: Connection, projections: Sequence[Projection], batch_size: int
) -> tuple[int, dict[str, int]]:
    """Fold one batch into ``projections`` inside the caller's transaction, from one read of the log.

    The page starts after the checkpoint furthest behind; a projection
    further on folds only the events past its own. Returns the page's length
    and the events folded per projection. A projection whose checkpoint
    another runner (or a rebuild's swap) holds is left out; when all are,
    the page is empty.
    """
    held = {}
    for projection in projections:
        row = connection.execute(LOCK_CHECKPOINT, {"name": projection.name}).first()
        if row is not None:
            held[projection] = Checkpoint(int(row.transaction_id), row.global_position)
    if not held:
        return 0, {}
    [reading] = {projection.reading for projection in held}  # the caller groups projections by what they read
    page = read_page(connection, min(held.values()), HORIZON, batch_size, reading=reading)
    folded = {}
    for projection, after in held.items():
        events = [recorded for recorded in page if recorded.checkpoint > after]
        if events:
            projection.applier.apply(connection, events)
            last = events[-1].checkpoint
            connection.execute(ADVANCE, {"name": projection.name, "tx": str(last.transaction_id),
                                         "pos": last.global_position, "applied": len(events)})
        folded[projection.name] = len(events)
    return len(page), folded


def ensure_checkpoints(engine: Engine, projections: Sequence[Projection]) -> None:
    with engine.begin() as connection:
        for projection in projections:
            connection.execute(ENSURE_CHECKPOINT, {"name": projection.name})


def catch_up(
    engine: Engine, projections: Sequence[Projection] | None = None, *, batch_size: int = 1000,
) -> dict[str, int]:
    """Fold every event below the horizon into each catch-up projection; events folded per projection."""
    return CatchUpRunner(engine, projections, batch_size=batch_size).run_once()


class CatchUpRunner:
    """Keeps the catch-up projections up with the log until ``stop()``.

    Wakes on NOTIFY ``authledger_events`` (sent when a transaction that
    appended events commits), and polls as a fallback: a notification can be
    missed while reconnecting, and events held back by an older open
    transaction become readable when that transaction ends, which sends none.

    A wake-up is followed by ``gather_seconds`` of waiting, so that the
    commits of a busy moment are folded in one pass: every API request
    commits and notifies, and a pass per request cost the database more than
    the request itself (then a transaction, and its fsync, per projection). The
    catch-up projections lag the log by that much more; nothing that decides
    reads them.
    """

    def __init__(
        self, engine: Engine, projections: Sequence[Projection] | None = None, *, batch_size: int = 1000,
        poll_seconds: float = 5.0, held_back_poll_seconds: float = 0.25, gather_seconds: float = 0.2,
    ) -> None:
        self.engine = engine
        self.projections = list(projections) if projections is not None else catch_up_projections()
        self.batch_size, self.poll_seconds = batch_size, poll_seconds
        self.held_back_poll_seconds, self.gather_seconds = held_back_poll_seconds, gather_seconds
        self.stopping = threading.Event()
        self._wake = threading.Event()
        self._checkpoints_ensured = False
        self.applied: dict[str, int] = {p.name: 0 for p in self.projections}
        self.passes = 0  # passes of run() that folded some events

    def run_once(self) -> dict[str, int]:
        """Catch every projection up to the current horizon; events folded per projection."""
        if not self._checkpoints_ensured:
            ensure_checkpoints(self.engine, self.projections)
            self._checkpoints_ensured = True
        folded = {p.name: 0 for p in self.projections}
        for group in _by_reading(self.projections):
            while not self.stopping.is_set():
                with self.engine.begin() as connection:
                    try:
                        read, batch = catch_up_batch(connection, group, self.batch_size)
                    except BaseException:
                        for projection in group:
                            projection.applier.forget()
                        raise
                for name, n in batch.items():
                    folded[name] += n
                    self.applied[name] += n
                if read < self.batch_size:
                    break
        return folded

    def run(self) -> None:
        """Fold until ``stop()``; a database outage is logged and retried, never fatal."""
        listener = start_listener(self.engine, CHANNEL, self._wake.set, self.stopping,
                                  retry_seconds=self.poll_seconds, log=log, name="catchup-listener")
        log_event(log, "catch-up runner started", projections=",".join(p.name for p in self.projections))
        logged, since_log = time.monotonic(), dict.fromkeys(self.applied, 0)
        while not self.stopping.is_set():
            self._wake.clear()
            try:
                folded = self.run_once()
                if any(folded.values()):
                    self.passes += 1
                for name, n in folded.items():
                    since_log[name] += n
                wait = self.held_back_poll_seconds if self._held_back() else self.poll_seconds
                if any(since_log.values()) and time.monotonic() - logged >= LOG_EVERY_SECONDS:
                    log_event(log, "caught up", **since_log)  # one line per interval, not per wake-up
                    logged, since_log = time.monotonic(), dict.fromkeys(self.applied, 0)
            except Exception as error:  # noqa: BLE001 - logged; the loop outlives any one failure
                log_event(log, "catch-up failed; retrying", logging.ERROR, error=error_line(error))
                wait = self.poll_seconds
            if self._wake.wait(timeout=wait):
                self.stopping.wait(self.gather_seconds)  # let the rest of the burst commit
        listener.join(timeout=2)
        log_event(log, "catch-up runner stopped", **self.applied)

    def stop(self) -> None:
        self.stopping.set()
        self._wake.set()

    def _held_back(self) -> bool:
        """True when committed events wait behind an older open transaction: poll soon."""
        with reading(self.engine) as connection:
            for projection in self.projections:
                stored = read_checkpoint(connection, projection.name)
                visible = count_events(connection, stored.checkpoint, COMMITTED)
                if visible:
                    return True
        return False


def _by_reading(projections: Sequence[Projection]) -> list[list[Projection]]:
    """The projections in groups that read the log alike, so that each group's batch reads and decodes it once
    (the API's process spent a sixth of its CPU decoding every event once per catch-up projection)."""
    groups: dict[object, list[Projection]] = {}
    for projection in projections:
        groups.setdefault(projection.reading, []).append(projection)
    return list(groups.values())
