"""Reading a stretch of the whole log in horizon order, page by page, decoded.

Every whole-log reader pages through ``events`` by the key
(transaction_id, global_position), and each reads up to a different bound:

- ``horizon``: only transactions below the oldest one still running, so that
  nothing can later commit behind the reader (catch-up projections, rebuilds);
- ``committed``: everything the statement's snapshot sees (the last catch-up
  of a rebuild, under a lock that keeps the projection's writers out, and
  ``verify``, inside one repeatable-read snapshot);
- ``upto``: up to a checkpoint, every transaction of which has committed;
- ``as_of`` / ``to_position``: a past moment, for replays into a side schema.

What a reader needs of each event is a ``Reading``. Folds need neither the
metadata (actor, client) nor the personal fields, and a rebuild of an inline
projection needs only the event types it folds: reading less makes a rebuild
of the reset tokens skip three quarters of the log, and keeps the master key
out of projection commands altogether. Personal fields, when asked for, are
opened with the data keys of ``subject_keys`` (one query per page): a user
erased by ``privacy forget`` then reads as ``[erased]``; otherwise they stay
sealed, exactly as stored.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from attrs import frozen
from sqlalchemy import Connection, TextClause, text

from infra.errors import PersonalDataUnreadable
from domain.log import Checkpoint, RecordedEvent
from infra.eventlog.personal_data import FieldContext, Keyring
from infra.eventlog.codec import EventCodec, default_codec
from infra.eventlog.subject_keys import keyring_for

_SELECT = """
    SELECT global_position, stream_id, stream_version, event_id, event_type, schema_version,
           payload, {metadata} AS metadata, {recorded_at} AS recorded_at, transaction_id::text AS transaction_id
      FROM events
     WHERE (transaction_id, global_position) > (CAST(:tx AS text)::xid8, :pos)
       AND {bound} AND {types}
     ORDER BY events.transaction_id, events.global_position  -- the columns, not the text aliases
     LIMIT :limit
"""
_COUNT = """
    SELECT count(*) FROM events
     WHERE (transaction_id, global_position) > (CAST(:tx AS text)::xid8, :pos) AND {bound}
       AND (CAST(:event_types AS text[]) IS NULL OR event_type = ANY(CAST(:event_types AS text[])))
"""
_BOUNDS = {
    "horizon": "transaction_id < pg_snapshot_xmin(pg_current_snapshot())",
    "committed": "TRUE",
    "upto": "(transaction_id, global_position) <= (CAST(:upto_tx AS text)::xid8, :upto_pos)",
    "as_of": "recorded_at <= :as_of",
    "to_position": "global_position <= :to_position",
}
AT_POSITIONS = text("""
    SELECT global_position, stream_id, stream_version, event_id, event_type, schema_version,
           payload, metadata, recorded_at, transaction_id::text AS transaction_id
      FROM events WHERE global_position = ANY(:positions)
""")
COUNTS = {name: text(_COUNT.format(bound=bound)) for name, bound in _BOUNDS.items()}


@frozen
class LogBound:
    """How far a reader reads; build one with the functions below."""

    name: str
    params: dict[str, Any]

    def describe(self) -> str:
        if self.name == "as_of":
            return f"as of {self.params['as_of'].isoformat()}"
        if self.name == "to_position":
            return f"up to position {self.params['to_position']}"
        if self.name == "upto":
            return f"up to checkpoint ({self.params['upto_tx']}, {self.params['upto_pos']})"
        return self.name


@frozen
class Reading:
    """What a reader needs of each event, beyond the event itself."""

    event_types: frozenset[str] | None = None  # only these tags; None: every event
    details: bool = True  # metadata (actor, client, request id) and recorded_at
    personal_data: bool = False  # open personal fields (needs the master key) rather than leave them sealed


EVERYTHING = Reading()
FOLDING = Reading(details=False)  # what a projection's fold needs


class _Sealed:
    """A keyring that opens nothing: personal fields stay as stored, and no key is ever needed."""

    def seal(self, context: FieldContext, plaintext: str) -> str:
        raise PersonalDataUnreadable("a log reader never writes personal data")

    def open(self, context: FieldContext, envelope: str) -> str:
        return envelope


SEALED = _Sealed()


@functools.cache
def _page_query(bound: str, details: bool, filtered: bool) -> TextClause:
    return text(_SELECT.format(
        bound=_BOUNDS[bound], metadata="metadata" if details else "NULL::jsonb",
        recorded_at="recorded_at" if details else "NULL::timestamptz",
        types="event_type = ANY(:event_types)" if filtered else "TRUE",
    ))


HORIZON = LogBound("horizon", {})
COMMITTED = LogBound("committed", {})


def upto(checkpoint: Checkpoint) -> LogBound:
    return LogBound("upto", {"upto_tx": str(checkpoint.transaction_id), "upto_pos": checkpoint.global_position})


def as_of(moment: datetime) -> LogBound:
    """Events of transactions that began by ``moment`` (``recorded_at`` is the transaction's start)."""
    return LogBound("as_of", {"as_of": moment})


def to_position(position: int) -> LogBound:
    return LogBound("to_position", {"to_position": position})


def _keyring(connection: Connection, rows: Sequence[Any], reading: Reading) -> Keyring:
    return keyring_for(connection, ((row.event_type, row.payload) for row in rows)) if reading.personal_data else SEALED


def read_page(
    connection: Connection, after: Checkpoint, bound: LogBound = HORIZON, limit: int = 5000,
    codec: EventCodec | None = None, reading: Reading = EVERYTHING,
) -> list[RecordedEvent]:
    """The next ``limit`` events after ``after`` within ``bound``, in horizon order.

    With ``reading.event_types``, only events of those types: the page then
    ends at the last of them, and a short page still means the bound was reached.
    """
    codec = codec or default_codec()
    params = {"tx": str(after.transaction_id), "pos": after.global_position, "limit": limit, **bound.params}
    filtered = reading.event_types is not None
    if filtered:
        params["event_types"] = sorted(reading.event_types or ())
    rows = connection.execute(_page_query(bound.name, reading.details, filtered), params).all()
    keyring = _keyring(connection, rows, reading)
    return [codec.decode_row(row, keyring) for row in rows]


def pages(
    connection: Connection, after: Checkpoint, bound: LogBound = HORIZON, limit: int = 5000,
    reading: Reading = EVERYTHING,
) -> Iterator[list[RecordedEvent]]:
    """Pages until the bound is reached; each page is read by its own statement."""
    while page := read_page(connection, after, bound, limit, reading=reading):
        yield page
        after = page[-1].checkpoint
        if len(page) < limit:
            return


def count_events(
    connection: Connection, after: Checkpoint, bound: LogBound = HORIZON, reading: Reading = EVERYTHING,
) -> int:
    """How many events ``read_page`` would return from ``after`` to the bound, all pages together."""
    types = sorted(reading.event_types) if reading.event_types is not None else None
    params = {"tx": str(after.transaction_id), "pos": after.global_position, "event_types": types, **bound.params}
    return connection.execute(COUNTS[bound.name], params).scalar_one()


def read_positions(
    connection: Connection, positions: list[int], codec: EventCodec | None = None, reading: Reading = EVERYTHING,
) -> list[RecordedEvent]:
    """The events at these positions (those the snapshot sees), in no particular order."""
    if not positions:
        return []
    codec = codec or default_codec()
    rows = connection.execute(AT_POSITIONS, {"positions": positions}).all()
    keyring = _keyring(connection, rows, reading)
    return [codec.decode_row(row, keyring) for row in rows]
