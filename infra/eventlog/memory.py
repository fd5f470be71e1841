"""An in-memory event store with the same contract as the PostgreSQL one.

For domain-level tests only; tests/contract runs the same cases against both.
Everything it holds is committed at once, so its horizon is simply "all".
It keeps the events themselves, but encodes each one, personal fields sealed
with a ``MemoryKeyring``, so that it refuses what PostgreSQL would refuse.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from domain.errors import ConcurrencyConflict
from domain.log import Checkpoint, RecordedEvent
from infra.eventlog.personal_data import MemoryKeyring
from infra.eventlog.codec import EventCodec, default_codec
from infra.eventlog.ids import time_ordered_id


class InMemoryEventStore:
    """``EventStore`` in a Python list, safe to share between threads."""

    def __init__(self, codec: EventCodec | None = None) -> None:
        self.codec = codec or default_codec()
        self.keyring = MemoryKeyring()
        self._events: list[RecordedEvent] = []
        self._versions: dict[str, int] = {}
        self._lock = threading.Lock()

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
        """Append to several streams at once: every stream at its expected version, or nothing."""
        with self._lock:
            for stream_id, expected_version, events in batches:
                actual = self._versions.get(stream_id, 0)
                if events and actual != expected_version:
                    raise ConcurrencyConflict(f"stream {stream_id} is at version {actual}, not {expected_version}")
            # Encode first, as PostgreSQL does: an unknown class refuses the whole append.
            encoded = [[self.codec.encode(event, self.keyring) for event in events] for _, _, events in batches]
            transaction_id = len(self._events) + 1
            recorded: list[RecordedEvent] = []
            for (stream_id, expected_version, events), tags in zip(batches, encoded, strict=True):
                for offset, (event, (tag, version, _)) in enumerate(zip(events, tags, strict=True), start=1):
                    recorded.append(
                        RecordedEvent(
                            global_position=len(self._events) + len(recorded) + 1,
                            stream_id=stream_id,
                            stream_version=expected_version + offset,
                            event_id=time_ordered_id(),
                            event_type=tag,
                            schema_version=version,
                            event=event,
                            metadata=dict(metadata or {}),
                            recorded_at=datetime.now(UTC),
                            transaction_id=transaction_id,
                        )
                    )
                if events:
                    self._versions[stream_id] = expected_version + len(events)
            self._events.extend(recorded)
            return recorded

    def load(self, stream_id: str) -> list[RecordedEvent]:
        with self._lock:
            return [event for event in self._events if event.stream_id == stream_id]

    def stream_version(self, stream_id: str) -> int:
        with self._lock:
            return self._versions.get(stream_id, 0)

    def read_all(self, after: Checkpoint = Checkpoint(), limit: int = 1000) -> list[RecordedEvent]:
        """Events after a checkpoint in horizon order; on PostgreSQL, ``infra.eventlog.reader`` does this."""
        with self._lock:
            return [event for event in self._events if event.checkpoint > after][:limit]
