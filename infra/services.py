"""Service functions: load a stream, decide, append, fold the read models; one transaction.

Each is a few lines on top of ``decide_on_stream``, which owns the retry on
``ConcurrencyConflict``: the user's stream is the consistency boundary, so
two concurrent requests for one user are decided one after the other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any
from uuid import UUID, uuid4

from attrs import field, frozen
from sqlalchemy import Connection, Engine

from domain.decisions import Decision
from domain.delivery import DeliveryPolicy
from domain.email import email_stream
from domain.errors import ConcurrencyConflict
from domain.log import RecordedEvent
from domain.policy import OtpPolicy, ResetPolicy
from domain.tokens import TokenKeys
from infra.clock import Clock, SystemClock
from infra.database import database_errors
from infra.inline_projections import apply_inline
from infra.postgres_store import PostgresEventStore

CONFLICT_RETRIES = 8


@frozen
class ServiceContext:
    """What every service function needs; built by ``App`` or by a test."""

    engine: Engine
    keys: TokenKeys = field(repr=False)
    clock: Clock = field(factory=SystemClock)
    reset_policy: ResetPolicy = field(factory=ResetPolicy)
    otp_policy: OtpPolicy = field(factory=OtpPolicy)
    delivery_policy: DeliveryPolicy = field(factory=DeliveryPolicy)
    reset_url: str = "http://localhost:8000/reset"
    new_id: Callable[[], UUID] = uuid4


def record_decision(
    connection: Connection, stream_id: str, expected_version: int, decision: Decision,
    metadata: Mapping[str, Any] | None,
) -> list[RecordedEvent]:
    """Append a decision's events and emails in one statement and fold them inline."""
    batches = [(stream_id, expected_version, decision.events)]
    batches += [(email_stream(queued.message_id), 0, [queued]) for queued in decision.emails]
    recorded = PostgresEventStore(connection).append_many(batches, metadata)
    apply_inline(connection, recorded)
    return recorded


def decide_on_stream(
    ctx: ServiceContext,
    stream_id: str,
    fold: Callable[[Iterable[object]], Any],
    decide: Callable[[Any], Decision],
    metadata: Mapping[str, Any] | None = None,
) -> Decision:
    """Load the stream, decide on its state, append the result; retry when another writer won."""
    for attempt in range(CONFLICT_RETRIES):
        try:
            with database_errors(), ctx.engine.begin() as connection:
                history = PostgresEventStore(connection).load(stream_id)
                decision = decide(fold(recorded.event for recorded in history))
                version = history[-1].stream_version if history else 0
                record_decision(connection, stream_id, version, decision, metadata)
                return decision
        except ConcurrencyConflict:
            if attempt == CONFLICT_RETRIES - 1:
                raise
    raise AssertionError("unreachable")


def load_state(ctx: ServiceContext, stream_id: str, fold: Callable[[Iterable[object]], Any]) -> Any:
    with database_errors(), ctx.engine.connect() as connection:
        return fold(recorded.event for recorded in PostgresEventStore(connection).load(stream_id))
