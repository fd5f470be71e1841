"""The sealer: a catch-up reader that hashes the log into a chain, and the check of that chain.

Sealing follows the transaction-id horizon like every whole-log reader, so
an event that commits late is sealed in its place rather than skipped. The
newest seal is the checkpoint; each batch reads it, extends the chain and
writes its seals in one transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from attrs import frozen
from sqlalchemy import Connection, Engine, text

from domain.errors import NotFound
from projections.audit_chain import GENESIS, ChainCheck, LoggedEvent, Seal, check_chain, format_time, link_events

# Two sealers at once would both extend the same head and fork the chain (the
# unique chain_index would then fail one of them after all its work). A
# transaction-scoped advisory lock makes the second wait and continue from
# the first one's head instead.
SEAL_LOCK = text("SELECT pg_advisory_xact_lock(hashtext('authledger seal'))")

HEAD = text("""
    SELECT chain_index, global_position, transaction_id::text AS transaction_id, stream_id, stream_version, link
      FROM seals ORDER BY chain_index DESC LIMIT 1
""")

SEAL_AT_INDEX = text("""
    SELECT chain_index, global_position, transaction_id::text AS transaction_id, stream_id, stream_version, link
      FROM seals WHERE chain_index = :chain_index
""")

SEAL_OF_POSITION = text("""
    SELECT chain_index, global_position, transaction_id::text AS transaction_id, stream_id, stream_version, link
      FROM seals WHERE global_position = :position
""")

SEALS_FROM = text("""
    SELECT chain_index, global_position, transaction_id::text AS transaction_id, stream_id, stream_version, link
      FROM seals WHERE chain_index >= :first AND chain_index <= :last
     ORDER BY chain_index LIMIT :limit
""")

INDEX_RANGE = text("""
    SELECT (SELECT min(chain_index) FROM seals WHERE global_position >= :from_position) AS first,
           (SELECT max(chain_index) FROM seals WHERE global_position <= :to_position) AS last
""")

# The same horizon as every whole-log reader (infra.eventlog.postgres.READ_ALL),
# but the stored columns as they are: the chain covers bytes, not classes,
# and must seal an event even if this version of the code cannot decode it.
# ORDER BY names the table's columns: a bare transaction_id would mean the
# text output column and sort xid 1000 before xid 982.
TO_SEAL = text("""
    SELECT global_position, transaction_id::text AS transaction_id, stream_id, stream_version,
           event_id::text AS event_id, event_type, schema_version, payload, metadata, recorded_at
      FROM events
     WHERE transaction_id < pg_snapshot_xmin(pg_current_snapshot())
       AND (transaction_id, global_position) > (CAST(:tx AS text)::xid8, :pos)
     ORDER BY events.transaction_id, events.global_position
     LIMIT :limit
""")

EVENTS_BETWEEN = text("""
    SELECT global_position, transaction_id::text AS transaction_id, stream_id, stream_version,
           event_id::text AS event_id, event_type, schema_version, payload, metadata, recorded_at
      FROM events
     WHERE (transaction_id, global_position) > (CAST(:tx AS text)::xid8, :pos)
       AND (transaction_id, global_position) <= (CAST(:last_tx AS text)::xid8, :last_pos)
     ORDER BY events.transaction_id, events.global_position
     LIMIT :limit
""")

EVENT_AT = text("""
    SELECT global_position, transaction_id::text AS transaction_id, stream_id, stream_version,
           event_id::text AS event_id, event_type, schema_version, payload, metadata, recorded_at
      FROM events WHERE global_position = :position
""")

COUNTS = text("""
    SELECT count(*) FILTER (WHERE transaction_id < pg_snapshot_xmin(pg_current_snapshot())) AS sealable,
           count(*) FILTER (WHERE transaction_id >= pg_snapshot_xmin(pg_current_snapshot())) AS waiting
      FROM events WHERE (transaction_id, global_position) > (CAST(:tx AS text)::xid8, :pos)
""")

INSERT_SEALS = text("""
    INSERT INTO seals (chain_index, global_position, transaction_id, stream_id, stream_version, link)
    SELECT * FROM unnest(CAST(:indexes AS bigint[]), CAST(:positions AS bigint[]),
                         CAST(CAST(:transaction_ids AS text[]) AS xid8[]), CAST(:stream_ids AS text[]),
                         CAST(:versions AS integer[]), CAST(:links AS bytea[]))
""")

# Below any real key: a forged event with a made-up small position is still read.
BEFORE_ALL = (0, -(2**63))
BATCH = 5000


def logged_event(row: Any) -> LoggedEvent:
    return LoggedEvent(
        global_position=row.global_position,
        transaction_id=int(row.transaction_id),
        stream_id=row.stream_id,
        stream_version=row.stream_version,
        event_id=row.event_id,
        event_type=row.event_type,
        schema_version=row.schema_version,
        payload=row.payload,
        metadata=row.metadata,
        recorded_at=format_time(row.recorded_at),
    )


def _seal(row: Any) -> Seal:
    return Seal(row.chain_index, row.global_position, int(row.transaction_id), row.stream_id,
                row.stream_version, bytes(row.link))


def chain_head(connection: Connection) -> Seal | None:
    row = connection.execute(HEAD).first()
    return _seal(row) if row is not None else None


def _after(head: Seal | None) -> dict[str, Any]:
    tx, pos = head.key if head is not None else BEFORE_ALL
    return {"tx": str(tx), "pos": pos}


@frozen
class Backlog:
    """Events after the chain head: sealable now, or waiting for an older transaction to finish."""

    sealable: int
    waiting: int


def backlog(engine: Engine) -> Backlog:
    with engine.connect() as connection:
        head = chain_head(connection)
        row = connection.execute(COUNTS, _after(head)).one()
    return Backlog(row.sealable, row.waiting)


@frozen
class SealResult:
    sealed: int
    head: Seal | None
    backlog: Backlog


def seal(engine: Engine, *, batch_size: int = BATCH, progress: Callable[[int], None] | None = None) -> SealResult:
    """Seal every event committed below the horizon; one transaction per batch."""
    sealed = 0
    while True:
        with engine.begin() as connection:
            connection.execute(SEAL_LOCK)
            head = chain_head(connection)
            rows = connection.execute(TO_SEAL, {**_after(head), "limit": batch_size}).all()
            if rows:
                _write_seals(connection, head, [logged_event(row) for row in rows])
        sealed += len(rows)
        if progress is not None and rows:
            progress(len(rows))
        if len(rows) < batch_size:
            break
    with engine.connect() as connection:
        head = chain_head(connection)
    return SealResult(sealed, head, backlog(engine))


def _write_seals(connection: Connection, head: Seal | None, events: list[LoggedEvent]) -> None:
    first = head.chain_index + 1 if head is not None else 0
    links = [link for _, link in link_events(events, head.link if head is not None else GENESIS)]
    connection.execute(INSERT_SEALS, {
        "indexes": list(range(first, first + len(events))),
        "positions": [event.global_position for event in events],
        "transaction_ids": [str(event.transaction_id) for event in events],
        "stream_ids": [event.stream_id for event in events],
        "versions": [event.stream_version for event in events],
        "links": links,
    })


@frozen
class ChainRange:
    """A stretch of the chain to check: from ``first`` (continuing ``anchor``) to ``last``."""

    first: int
    last: int
    anchor: bytes
    after: tuple[int, int]  # events strictly after this key ...
    upto: tuple[int, int]  # ... and up to this one belong to the stretch

    @property
    def length(self) -> int:
        return self.last - self.first + 1


def chain_range(connection: Connection, first: int | None = None, last: int | None = None) -> ChainRange | None:
    """The stretch between two chain indexes (default: all of it); None when nothing is sealed."""
    head = chain_head(connection)
    if head is None:
        return None
    first = 0 if first is None else first
    last_seal = head if last is None or last >= head.chain_index else seal_at(connection, last)
    previous = seal_at(connection, first - 1) if first > 0 else None
    if last_seal is None or (first > 0 and previous is None):
        raise NotFound(f"chain index {first if last_seal else last} has no seal")
    return ChainRange(first, last_seal.chain_index, previous.link if previous else GENESIS,
                      previous.key if previous else BEFORE_ALL, last_seal.key)


def position_range(connection: Connection, from_position: int | None, to_position: int | None) -> ChainRange | None:
    """The stretch of the chain whose seals name events between two positions."""
    row = connection.execute(INDEX_RANGE, {"from_position": from_position or -(2**63),
                                           "to_position": to_position or 2**63 - 1}).one()
    if row.first is None or row.last is None or row.first > row.last:
        raise NotFound(f"no sealed events between positions {from_position or 'start'} and {to_position or 'end'}")
    return chain_range(connection, row.first, row.last)


def seal_at(connection: Connection, chain_index: int) -> Seal | None:
    row = connection.execute(SEAL_AT_INDEX, {"chain_index": chain_index}).first()
    return _seal(row) if row is not None else None


def seals_in(connection: Connection, stretch: ChainRange, batch: int = BATCH) -> Iterator[Seal]:
    first = stretch.first
    while first <= stretch.last:
        rows = connection.execute(SEALS_FROM, {"first": first, "last": stretch.last, "limit": batch}).all()
        if not rows:
            return
        yield from (_seal(row) for row in rows)
        first = rows[-1].chain_index + 1


def events_in(connection: Connection, stretch: ChainRange, batch: int = BATCH) -> Iterator[LoggedEvent]:
    tx, pos = stretch.after
    last_tx, last_pos = stretch.upto
    while True:
        rows = connection.execute(EVENTS_BETWEEN, {"tx": str(tx), "pos": pos, "last_tx": str(last_tx),
                                                   "last_pos": last_pos, "limit": batch}).all()
        yield from (logged_event(row) for row in rows)
        if len(rows) < batch:
            return
        tx, pos = int(rows[-1].transaction_id), rows[-1].global_position


def check_stretch(
    connection: Connection,
    stretch: ChainRange,
    *,
    watch: tuple[int, ...] = (),
    on_entry: Callable[[LoggedEvent, Seal], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> ChainCheck:
    """Recompute one stretch of the chain from the events and compare it with the stored seals."""

    def locate_event(position: int) -> LoggedEvent | None:
        row = connection.execute(EVENT_AT, {"position": position}).first()
        return logged_event(row) if row is not None else None

    def locate_seal(position: int) -> Seal | None:
        row = connection.execute(SEAL_OF_POSITION, {"position": position}).first()
        return _seal(row) if row is not None else None

    return check_chain(
        events_in(connection, stretch), seals_in(connection, stretch),
        anchor=stretch.anchor, first_index=stretch.first, locate_event=locate_event, locate_seal=locate_seal,
        watch=watch, on_entry=on_entry, progress=progress,
    )


def snapshot(engine: Engine) -> Any:
    """One consistent view of log and seals for a whole check, while sealers and writers go on."""
    return engine.connect().execution_options(isolation_level="REPEATABLE READ")
