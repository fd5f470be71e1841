"""The event log as the domain sees it: recorded events, checkpoints, the store port."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from attrs import field, frozen


@frozen(order=True)
class Checkpoint:
    """How far a whole-log reader got: the last (transaction_id, global_position) it saw.

    Readers order the log by commit horizon rather than by position, because
    a bigint identity is handed out at insert time but commits out of order.
    """

    transaction_id: int = 0
    global_position: int = 0


@frozen
class RecordedEvent:
    """A domain event as stored in the log, with its place in it."""

    global_position: int
    stream_id: str
    stream_version: int
    event_id: UUID
    event_type: str
    schema_version: int
    event: Any
    metadata: Mapping[str, Any] = field(factory=dict)
    recorded_at: datetime | None = None
    transaction_id: int = 0

    @property
    def checkpoint(self) -> Checkpoint:
        return Checkpoint(self.transaction_id, self.global_position)


class EventStore(Protocol):
    """Append to and read from the log inside the caller's unit of work."""

    def append(
        self,
        stream_id: str,
        expected_version: int,
        events: Sequence[Any],
        metadata: Mapping[str, Any] | None = None,
    ) -> list[RecordedEvent]:
        """Append events after ``expected_version``; raise ConcurrencyConflict if the stream moved."""
        ...

    def load(self, stream_id: str) -> list[RecordedEvent]:
        """Every event of one stream, oldest first."""
        ...
