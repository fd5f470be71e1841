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
from uuid import uuid4

from domain.errors import ConcurrencyConflict
from domain.log import Checkpoint, RecordedEvent
from infra.personal_data import MemoryKeyring
from infra.serialization import EventCodec, default_codec


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
        if not events:
            return []
        with self._lock:
            actual = self._versions.get(stream_id, 0)
            if actual != expected_version:
                raise ConcurrencyConflict(f"stream {stream_id} is at version {actual}, not {expected_version}")
            transaction_id = len(self._events) + 1
            recorded = []
            for offset, event in enumerate(events, start=1):
                tag, version, _ = self.codec.encode(event, self.keyring)  # same refusal of unknown classes as PostgreSQL
                recorded.append(
                    RecordedEvent(
                        global_position=len(self._events) + offset,
                        stream_id=stream_id,
                        stream_version=expected_version + offset,
                        event_id=uuid4(),
                        event_type=tag,
                        schema_version=version,
                        event=event,
                        metadata=dict(metadata or {}),
                        recorded_at=datetime.now(UTC),
                        transaction_id=transaction_id,
                    )
                )
            self._events.extend(recorded)
            self._versions[stream_id] = expected_version + len(events)
            return recorded

    def load(self, stream_id: str) -> list[RecordedEvent]:
        with self._lock:
            return [event for event in self._events if event.stream_id == stream_id]

    def stream_version(self, stream_id: str) -> int:
        with self._lock:
            return self._versions.get(stream_id, 0)

    def read_all(self, after: Checkpoint = Checkpoint(), limit: int = 1000) -> list[RecordedEvent]:
        with self._lock:
            return [event for event in self._events if event.checkpoint > after][:limit]
