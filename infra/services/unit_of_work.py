"""Service functions: load a stream, decide, append, fold the read models; one transaction.

Each is a few lines on top of ``decide_on_stream``, which owns the retry on
``ConcurrencyConflict``: the user's stream is the consistency boundary, so
two concurrent requests for one user are decided one after the other.
Requests with an idempotency key also take an advisory lock on the key, so
that retries in flight wait for (or are refused while) the first one runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal
from uuid import UUID, uuid4

from attrs import field, frozen
from sqlalchemy import Connection, Engine, text

from domain.decisions import Decision
from domain.delivery import DeliveryPolicy
from domain.email import email_stream
from domain.errors import ConcurrencyConflict
from infra.errors import RequestInFlight
from domain.log import RecordedEvent
from domain.policy import OtpPolicy, ResetPolicy
from domain.tokens import TokenKeys
from infra.clock import Clock, SystemClock
from infra.projector.inline import apply_inline
from infra.eventlog.postgres import PostgresEventStore

CONFLICT_RETRIES = 8

InFlight = Literal["wait", "refuse"]
WAIT_FOR_KEY = text("SELECT pg_advisory_xact_lock(:key)")
TRY_KEY = text("SELECT pg_try_advisory_xact_lock(:key)")


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


def _check_in_flight(in_flight: object) -> None:
    if in_flight not in ("wait", "refuse"):
        raise ValueError(f"in_flight must be 'wait' or 'refuse', got {in_flight!r}")


@frozen
class IdempotencyLock:
    """A request's idempotency key, to be held for the length of its transaction.

    ``in_flight`` says what a second request with the same key does while the
    first still runs: "wait" for it and then get the same answer (the CLI and
    other in-process callers), or "refuse" with ``RequestInFlight`` (the HTTP
    API answers 409 and the client retries).
    """

    flow: str
    client: str | None
    user_id: str
    idempotency_key: str
    in_flight: InFlight = "wait"

    def __attrs_post_init__(self) -> None:
        _check_in_flight(self.in_flight)

    @classmethod
    def for_request(
        cls, flow: str, client: str | None, user_id: str, idempotency_key: str | None, in_flight: InFlight
    ) -> IdempotencyLock | None:
        """The lock for a request, or None when it carries no key."""
        _check_in_flight(in_flight)  # a wrong value is a bug in the caller, key or not
        return cls(flow, client, user_id, idempotency_key, in_flight) if idempotency_key is not None else None

    @property
    def key(self) -> int:
        """A signed 64-bit digest of (flow, client, user, key): PostgreSQL's advisory lock id.

        A collision only makes two unrelated requests wait for each other.
        """
        scope = json.dumps(["idempotency", self.flow, self.client, self.user_id, self.idempotency_key])
        return int.from_bytes(hashlib.sha256(scope.encode("utf-8")).digest()[:8], "big", signed=True)

    def take(self, connection: Connection) -> None:
        """Hold the key until the transaction ends; ``RequestInFlight`` when refusing and taken."""
        if self.in_flight == "wait":
            connection.execute(WAIT_FOR_KEY, {"key": self.key})
        elif not connection.execute(TRY_KEY, {"key": self.key}).scalar_one():
            raise RequestInFlight()


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
    *,
    idempotency_lock: IdempotencyLock | None = None,
) -> Decision:
    """Load the stream, decide on its state, append the result; retry when another writer won.

    With ``idempotency_lock`` the key is locked before the stream is loaded,
    so the decision reads whatever the key's first request committed.
    """
    for attempt in range(CONFLICT_RETRIES):
        try:
            with ctx.engine.begin() as connection:
                if idempotency_lock is not None:
                    idempotency_lock.take(connection)
                history = PostgresEventStore(connection).load(stream_id)
                decision = decide(fold(recorded.event for recorded in history))
                version = history[-1].stream_version if history else 0
                record_decision(connection, stream_id, version, decision, metadata)
                return decision
        except ConcurrencyConflict:
            if attempt == CONFLICT_RETRIES - 1:
                raise
    raise AssertionError("unreachable")


def record_events(
    ctx: ServiceContext, stream_id: str, events: list[object], metadata: Mapping[str, Any] | None = None
) -> None:
    """Append facts that need no decision (a provider outage seen by a worker) at the end of ``stream_id``."""
    for attempt in range(CONFLICT_RETRIES):
        try:
            with ctx.engine.begin() as connection:
                store = PostgresEventStore(connection)
                history = store.load(stream_id)
                recorded = store.append_many(
                    [(stream_id, history[-1].stream_version if history else 0, events)], metadata
                )
                apply_inline(connection, recorded)
                return
        except ConcurrencyConflict:
            if attempt == CONFLICT_RETRIES - 1:
                raise


def load_state(
    ctx: ServiceContext, stream_id: str, fold: Callable[[Iterable[object]], Any], connection: Connection | None = None
) -> Any:
    """The folded state of one stream, on ``connection`` or a fresh one."""
    if connection is not None:
        return fold(recorded.event for recorded in PostgresEventStore(connection).load(stream_id))
    with ctx.engine.connect() as fresh:
        return fold(recorded.event for recorded in PostgresEventStore(fresh).load(stream_id))
