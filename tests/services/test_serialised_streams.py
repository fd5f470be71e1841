"""The unit of work's locks: writers of one stream take turns; a conflict never shows its stream."""

from __future__ import annotations

import threading
from datetime import datetime

import pytest
from sqlalchemy import Engine, text

from domain.clients import fold_client
from domain.errors import ConcurrencyConflict
from infra.errors import RequestInFlight
from infra.services.locks import IdempotencyLock, lock_stream, stream_lock_id
from infra.services.unit_of_work import ServiceContext, decide_events_on_stream
from tests.support.waiting import lock_waiters, wait_until


def test_a_conflict_that_outlasts_the_retries_is_raised_without_the_stream_name(ctx: ServiceContext) -> None:
    attempts = []

    def always_conflicting(state: object, now: datetime) -> list[object]:
        attempts.append(now)
        raise ConcurrencyConflict("stream client:shop moved on while appending")

    with pytest.raises(ConcurrencyConflict) as raised:
        decide_events_on_stream(ctx, "client:shop", fold_client, always_conflicting)

    assert len(attempts) > 1, "retried"
    assert "client:shop" not in str(raised.value) and "stream" not in str(raised.value)
    assert "client:shop" in str(raised.value.__cause__), "the cause keeps it, for the log"


def test_a_stream_lock_is_never_a_key_lock_of_the_same_words() -> None:
    key = IdempotencyLock("reset", "shop", "42", "k-1")
    assert stream_lock_id("reset-user:42") != key.key
    assert stream_lock_id("reset-user:42") == stream_lock_id("reset-user:42") != stream_lock_id("reset-user:43")


def test_a_writer_waits_for_the_stream_lock_and_reads_the_clock_once_it_has_it(
    ctx: ServiceContext, engine: Engine
) -> None:
    holder = StreamHolder(engine, "client:shop")
    seen: list[datetime] = []
    writer = threading.Thread(target=decide_events_on_stream, args=(
        ctx, "client:shop", fold_client, lambda state, now: seen.append(now) or []))
    writer.start()
    _wait_for_a_waiter(engine)
    assert seen == [], "it waits for the lock before deciding"
    ctx.clock.advance(5)
    holder.release()
    writer.join(10)
    assert seen == [ctx.clock.now()], "stamped with the time after the wait"


class StreamHolder:
    """A thread holding ``stream``'s lock in an open transaction from construction until ``release``."""

    def __init__(self, engine: Engine, stream: str) -> None:
        self._engine, self._stream = engine, stream
        self._held, self._released = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._hold)
        self._thread.start()
        assert self._held.wait(10), "the stream lock was taken"

    def _hold(self) -> None:
        with self._engine.begin() as connection:
            lock_stream(connection, self._stream)
            self._held.set()
            self._released.wait(10)

    def release(self) -> None:
        self._released.set()
        self._thread.join(10)


def _wait_for_a_waiter(engine: Engine) -> None:
    wait_until(lambda: lock_waiters(engine), what="someone to wait for the lock")


HELD = text("""
    SELECT count(*) FROM pg_locks
     WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()
       AND ((classid::bigint << 32) | objid::bigint) = (CAST(:key AS bigint) & 'xffffffffffffffff'::bit(64)::bigint)
""")


def test_a_request_holds_its_key_while_it_waits_for_its_stream_and_the_key_is_taken_first(
    ctx: ServiceContext, engine: Engine
) -> None:
    # One statement takes both locks now: the key is still held first, so a retry is refused (not queued
    # behind the stream) while the first request waits, and nobody holds a stream while waiting for a key.
    first = IdempotencyLock("client", None, "shop", "k-1", "wait")
    retry = IdempotencyLock("client", None, "shop", "k-1", "refuse")
    holder = StreamHolder(engine, "client:shop")
    waiting = threading.Thread(target=_take_both, args=(engine, first))
    waiting.start()
    _wait_for_a_waiter(engine)
    with engine.connect() as connection:
        assert connection.execute(HELD, {"key": first.key}).scalar_one() == 1, "the key is held while it waits"
    with engine.begin() as connection, pytest.raises(RequestInFlight):
        retry.take_with_stream(connection, "client:shop").confirm()
    holder.release()
    waiting.join(10)
    assert not waiting.is_alive()


def _take_both(engine: Engine, lock: IdempotencyLock) -> None:
    with engine.begin() as connection:
        lock.take_with_stream(connection, "client:shop")
