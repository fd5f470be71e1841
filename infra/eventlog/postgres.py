"""The event store on PostgreSQL: append and read inside the caller's transaction."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, column, text
from sqlalchemy.exc import IntegrityError

from domain.errors import ConcurrencyConflict
from domain.log import RecordedEvent
from infra.eventlog.codec import EventCodec, default_codec
from infra.db.pipeline import execute_read
from infra.eventlog.personal_data import KEY_ID_PATTERN
from infra.eventlog.subject_keys import PostgresKeyring
from infra.eventlog.tags import PERSONAL_FIELDS
from infra.eventlog.ids import time_ordered_id

# The payloads arrive as one JSON array, split here, not as a jsonb[]: psycopg
# writes a list of strings as an array literal, escaping each quote of each
# payload through a regular expression, and that took 85 µs of the client's
# CPU for a create's two events (bench/RESULTS.md, "The payloads as one JSON
# array").
_PAYLOADS = "ARRAY(SELECT p FROM jsonb_array_elements(CAST(:payloads AS jsonb)) WITH ORDINALITY AS x(p, i) ORDER BY i)"

# One round trip for any number of events in any number of streams, all or
# nothing. Each row carries the version its stream must be at; unless every
# stream is there, nothing is inserted (so no savepoint is needed to undo half
# an append). Two writers that both saw the same version collide on the unique
# (stream_id, stream_version) key instead.
APPEND = text(f"""
    WITH new AS (
        SELECT * FROM unnest(CAST(:stream_ids AS text[]), CAST(:expected_versions AS integer[]),
                             CAST(:offsets AS integer[]), CAST(:event_ids AS uuid[]), CAST(:event_types AS text[]),
                             CAST(:schema_versions AS integer[]), {_PAYLOADS})
               WITH ORDINALITY
               AS e(stream_id, expected_version, offset_in_stream, event_id, event_type, schema_version, payload, n)
    ), every_stream_expected AS (
        SELECT bool_and(n.expected_version = (SELECT coalesce(max(x.stream_version), 0) FROM events x
                                               WHERE x.stream_id = n.stream_id)) AS yes
          FROM new n
    )
    INSERT INTO events (stream_id, stream_version, event_id, event_type, schema_version, payload, metadata)
    SELECT n.stream_id, n.expected_version + n.offset_in_stream, n.event_id, n.event_type,
           n.schema_version, n.payload, CAST(:metadata AS jsonb)
      FROM new n, every_stream_expected
     WHERE every_stream_expected.yes
     ORDER BY n.n  -- positions follow the order the caller gave
    RETURNING global_position, stream_id, stream_version, event_id, recorded_at, transaction_id::text
""")

# A decision's shape: events for the one stream it read, at the version it
# read, and the first events of new streams (its emails). Only that stream's
# version is checked, with scalars; a new stream (expected version 0) needs no
# check, as an existing one already holds version 1 and collides on the
# unique key. With no array in the check, PostgreSQL caches a generic plan,
# where the general form above is planned on every call (bench/append.py
# measured 1,239 -> ~1,900 events/s for one event a call, when this form was
# for one event only).
APPEND_TO_ONE_STREAM = text(f"""
    INSERT INTO events (stream_id, stream_version, event_id, event_type, schema_version, payload, metadata)
    SELECT e.stream_id, e.stream_version, e.event_id, e.event_type, e.schema_version, e.payload,
           CAST(:metadata AS jsonb)
      FROM unnest(CAST(:stream_ids AS text[]), CAST(:stream_versions AS integer[]), CAST(:event_ids AS uuid[]),
                  CAST(:event_types AS text[]), CAST(:schema_versions AS integer[]), {_PAYLOADS})
           WITH ORDINALITY AS e(stream_id, stream_version, event_id, event_type, schema_version, payload, n)
     WHERE :expected_version = (SELECT coalesce(max(stream_version), 0) FROM events WHERE stream_id = :stream_id)
     ORDER BY e.n  -- positions follow the order the caller gave
    RETURNING global_position, stream_id, stream_version, event_id, recorded_at, transaction_id::text
""")

LOAD_STREAM = text("""
    SELECT global_position, stream_id, stream_version, event_id, event_type, schema_version,
           payload, metadata, recorded_at, transaction_id::text
      FROM events WHERE stream_id = :stream_id AND stream_version > :after ORDER BY stream_version
""")

# Several streams at once, each after a version of its own (its snapshot's, or
# 0), each event with the data key its personal fields were sealed under (when
# it still exists), so that reading a batch of users' requests and opening
# their addresses is one round trip.
LOAD_STREAMS = text("""
    SELECT e.global_position, e.stream_id, e.stream_version, e.event_id, e.event_type, e.schema_version,
           e.payload, e.metadata, e.recorded_at, e.transaction_id::text,
           k.key_user_id, k.key_id, k.master_key_id, k.wrapped_key
      FROM unnest(CAST(:stream_ids AS text[]), CAST(:after AS bigint[])) AS w(stream_id, after_version)
      JOIN events e ON e.stream_id = w.stream_id AND e.stream_version > w.after_version
      LEFT JOIN LATERAL (
            SELECT s.user_id AS key_user_id, s.key_id, s.master_key_id, s.wrapped_key
              FROM jsonb_each_text(e.payload) AS f
              JOIN subject_keys s ON s.key_id = substring(f.value FROM CAST(:envelope_key AS text))
             WHERE f.key = ANY(CAST(:personal_fields AS text[]))
            ) k ON true
     ORDER BY e.stream_id, e.stream_version
""").columns(*(column(name) for name in (  # named in order, so SQLAlchemy builds the result's metadata once
    "global_position", "stream_id", "stream_version", "event_id", "event_type", "schema_version", "payload",
    "metadata", "recorded_at", "transaction_id", "key_user_id", "key_id", "master_key_id", "wrapped_key")))
_PERSONAL_FIELDS = sorted({name for names in PERSONAL_FIELDS.values() for name in names})

STREAM_VERSION = text("SELECT coalesce(max(stream_version), 0) FROM events WHERE stream_id = :stream_id")

ANY_EVENTS = text("SELECT EXISTS (SELECT FROM events WHERE stream_id = ANY(CAST(:stream_ids AS text[])))")

def _unique_violation_on_stream_version(error: IntegrityError) -> bool:
    diag = getattr(error.orig, "diag", None)
    return getattr(diag, "constraint_name", None) == "events_stream_version_key"


class PostgresEventStore:
    """``EventStore`` on one SQLAlchemy connection; the caller owns the transaction.

    Personal fields are sealed and opened with the data keys of
    ``subject_keys`` on the same connection, so a user's key is created in
    the transaction of their first event. Build one store per unit of work:
    its keyring caches the keys it unwrapped.
    """

    def __init__(self, connection: Connection, codec: EventCodec | None = None) -> None:
        self.connection = connection
        self.codec = codec or default_codec()
        self.keyring = PostgresKeyring(connection)

    def append(
        self,
        stream_id: str,
        expected_version: int,
        events: Sequence[Any],
        metadata: Mapping[str, Any] | None = None,
    ) -> list[RecordedEvent]:
        return self.append_many([(stream_id, expected_version, events)], metadata)

    def append_many(
        self,
        batches: Sequence[tuple[str, int, Sequence[Any]]],
        metadata: Mapping[str, Any] | None = None,
    ) -> list[RecordedEvent]:
        """Append to several streams in one statement: all or nothing.

        ``batches`` holds (stream_id, expected_version, events); every stream
        must be at its expected version, else ``ConcurrencyConflict``.
        """
        rows_in = [
            (stream_id, expected, offset, time_ordered_id(), event, *self.codec.encode_json(event, self.keyring))
            for stream_id, expected, events in batches
            for offset, event in enumerate(events, start=1)
        ]
        if not rows_in:
            return []
        statement, params = self._append_statement(batches, rows_in, metadata)
        streams = ", ".join(sorted({stream_id for stream_id, _, _ in batches}))
        try:
            rows = execute_read(self.connection, statement, params)
        except IntegrityError as error:
            # The caller's transaction is aborted: it rolls back and decides again.
            if _unique_violation_on_stream_version(error):
                raise ConcurrencyConflict(f"stream {streams} moved on while appending") from error
            raise
        if not rows:
            raise ConcurrencyConflict(f"stream {streams} is not at the expected version")
        by_event_id = {row.event_id: row for row in rows}
        recorded = []
        for stream_id, _, _, event_id, event, tag, version, _ in rows_in:
            row = by_event_id[event_id]
            recorded.append(
                RecordedEvent(
                    global_position=row.global_position,
                    stream_id=stream_id,
                    stream_version=row.stream_version,
                    event_id=event_id,
                    event_type=tag,
                    schema_version=version,
                    event=event,
                    metadata=dict(metadata or {}),
                    recorded_at=row.recorded_at,
                    transaction_id=int(row.transaction_id),
                )
            )
        return recorded

    @staticmethod
    def _append_statement(
        batches: Sequence[tuple[str, int, Sequence[Any]]], rows_in: list[tuple[Any, ...]],
        metadata: Mapping[str, Any] | None,
    ) -> tuple[Any, dict]:
        encoded_metadata = json.dumps(dict(metadata or {}), separators=(",", ":"))
        columns = list(zip(*rows_in, strict=True))
        events = {"event_ids": list(columns[3]), "event_types": list(columns[5]),
                  "schema_versions": list(columns[6]), "payloads": f"[{','.join(columns[7])}]",
                  "metadata": encoded_metadata}
        (stream_id, expected, _), *others = batches
        if all(other_expected == 0 for _, other_expected, _ in others):
            return APPEND_TO_ONE_STREAM, {
                **events, "stream_id": stream_id, "expected_version": expected, "stream_ids": list(columns[0]),
                "stream_versions": [version + offset for _, version, offset, *_ in rows_in],
            }
        return APPEND, {
            **events, "stream_ids": list(columns[0]), "expected_versions": list(columns[1]),
            "offsets": list(columns[2]),
        }

    def load(self, stream_id: str, after_version: int = 0) -> list[RecordedEvent]:
        """The stream's events after ``after_version`` (a snapshot's), oldest first."""
        rows = self.connection.execute(LOAD_STREAM, {"stream_id": stream_id, "after": after_version}).all()
        return self._decode_all(rows)

    def load_many(self, after: Mapping[str, int]) -> dict[str, list[RecordedEvent]]:
        """The events of each stream in ``after`` past the version given for it (0: all), oldest first,
        read in one statement; an empty list for a stream with none."""
        stream_ids = list(after)
        params = {"stream_ids": stream_ids, "after": [after[stream_id] for stream_id in stream_ids],
                  "envelope_key": KEY_ID_PATTERN, "personal_fields": _PERSONAL_FIELDS}
        rows = self.connection.execute(LOAD_STREAMS, params).all()
        self.keyring.remember(
            (row.key_user_id, row.key_id, row.master_key_id, row.wrapped_key) for row in rows if row.key_id is not None
        )
        by_stream: dict[str, list[Any]] = {stream_id: [] for stream_id in stream_ids}
        last_position = None
        for row in rows:  # an event sealed under two keys comes once per key
            if row.global_position != last_position:
                by_stream[row.stream_id].append(row)
            last_position = row.global_position
        return {stream_id: self._decode_all(stream_rows) for stream_id, stream_rows in by_stream.items()}

    def stream_version(self, stream_id: str) -> int:
        return self.connection.execute(STREAM_VERSION, {"stream_id": stream_id}).scalar_one()

    def has_events(self, stream_ids: Sequence[str]) -> bool:
        """Whether any of these streams holds an event."""
        return self.connection.execute(ANY_EVENTS, {"stream_ids": list(stream_ids)}).scalar_one()

    def _decode_all(self, rows: Sequence[Any]) -> list[RecordedEvent]:
        self.keyring.prefetch((row.event_type, row.payload) for row in rows)
        return [self._decode(row) for row in rows]

    def _decode(self, row: Any) -> RecordedEvent:
        return self.codec.decode_row(row, self.keyring)
