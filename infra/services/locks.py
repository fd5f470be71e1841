"""Advisory locks that serialise a decision: an idempotency key's, then its stream's.

Transaction-scoped (``pg_advisory_xact_lock``), so a crash or a rollback
lets go of them. The order is always key, then stream: two transactions
cannot each hold what the other waits for. A transaction that needs more
than one stream (an erasure holds all of a user's) takes them with
``lock_streams``, in ascending order of lock id, the one order every such
transaction shares. The locks are deferred (``infra.db.pipeline``): the
read after them is not run until they are held, and a refused key is seen
once that read has waited (``LocksAsked``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Literal

from attrs import frozen
from sqlalchemy import Connection, text

from infra.db.pipeline import Pending, execute_deferred
from infra.errors import RequestInFlight

InFlight = Literal["wait", "refuse"]

WAIT_FOR_LOCK = text("SELECT pg_advisory_xact_lock(:key)")
TRY_LOCK = text("SELECT pg_try_advisory_xact_lock(:key)")
# A request's key and then its stream, in one round trip. CASE evaluates its
# WHEN before its THEN, so the key is held before the stream is asked for
# (the one order that keeps two transactions from waiting for each other);
# refused, the stream is never asked for. True when both are held.
WAIT_FOR_KEY_THEN_STREAM = text("""
    SELECT CASE WHEN pg_advisory_xact_lock(:key) IS NOT NULL THEN pg_advisory_xact_lock(:stream) IS NOT NULL END
""")
TRY_KEY_THEN_WAIT_FOR_STREAM = text("""
    SELECT CASE WHEN pg_try_advisory_xact_lock(:key) THEN pg_advisory_xact_lock(:stream) IS NOT NULL ELSE false END
""")


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
        return _lock_id(["idempotency", self.flow, self.client, self.user_id, self.idempotency_key])

    def take(self, connection: Connection) -> None:
        """Hold the key until the transaction ends; ``RequestInFlight`` when refusing and taken."""
        if self.in_flight == "wait":
            execute_deferred(connection, WAIT_FOR_LOCK, {"key": self.key})
        elif not connection.execute(TRY_LOCK, {"key": self.key}).scalar_one():
            raise RequestInFlight()

    def take_with_stream(self, connection: Connection, stream_id: str) -> LocksAsked:
        """``take``, then ``lock_stream``, in one statement and in that order, sent with the next that waits."""
        locks = {"key": self.key, "stream": stream_lock_id(stream_id)}
        if self.in_flight == "wait":
            execute_deferred(connection, WAIT_FOR_KEY_THEN_STREAM, locks)
            return LocksAsked(None)
        return LocksAsked(execute_deferred(connection, TRY_KEY_THEN_WAIT_FOR_STREAM, locks, answer=True))


@frozen
class LocksAsked:
    """A key and stream asked for in a pipeline: whether the key was free is known once a statement has waited.

    A refused request learns it with its read rather than a wait of its own;
    it then rolls back what it read without the stream's lock.
    """

    refusable: Pending | None  # None: waited for, so held by the time anything after it ran

    def confirm(self) -> None:
        """``RequestInFlight`` if the key was refused (the stream was then not asked for)."""
        if self.refusable is not None and not self.refusable.scalar_one():
            raise RequestInFlight()


def _lock_id(scope: list[str | None]) -> int:
    """A signed 64-bit digest of ``scope``; its first item keeps the kinds of lock apart."""
    text_of_scope = json.dumps(scope)
    return int.from_bytes(hashlib.sha256(text_of_scope.encode("utf-8")).digest()[:8], "big", signed=True)


def stream_lock_id(stream_id: str) -> int:
    """The advisory lock id of a stream; never equal to a key's but by a 64-bit hash collision."""
    return _lock_id(["stream", stream_id])


def lock_stream(connection: Connection, stream_id: str) -> LocksAsked:
    """Wait for, then hold until the transaction ends, the right to decide on ``stream_id``.

    Take it after any idempotency key lock, never before: one order for
    every transaction is what makes a deadlock between them impossible.
    """
    execute_deferred(connection, WAIT_FOR_LOCK, {"key": stream_lock_id(stream_id)})
    return LocksAsked(None)


def lock_streams(connection: Connection, stream_ids: Iterable[str]) -> None:
    """``lock_stream`` for each of ``stream_ids``, in ascending order of lock id, whatever order they come in.

    One statement per lock, each waited for before the next is sent: a
    lock asked for in a statement that also reads would be read past with
    that statement's snapshot, taken before the wait. Under READ COMMITTED
    the caller's next statement sees everything committed by the
    transactions it waited for.
    """
    for lock_id in sorted({stream_lock_id(stream_id) for stream_id in stream_ids}):
        connection.execute(WAIT_FOR_LOCK, {"key": lock_id})
