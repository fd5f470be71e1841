"""The delivery worker: a window of provider calls in flight, refilled as sends complete.

One worker process runs one asyncio event loop in its thread
(``infra/delivery/pipeline.py``). Idle, it sleeps until a NOTIFY on
``authledger_outbox`` (sent when mail is queued), the next retry falls due,
the circuit breaker's next probe, or the poll interval, whichever comes
first. On stop, it finishes the sends in flight, records them, and gives
back what it had claimed but not started with ``LeaseReleased``. A database
error does not end it: it backs off and takes up its unstarted claims and
unrecorded outcomes again once the database is back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from sqlalchemy import Engine

from domain.circuit import CircuitPolicy
from infra.db.listen import start_listener
from infra.db.reading import reading
from infra.delivery.breaker import Breaker
from infra.delivery.leases import Claim, claim_due, next_due
from infra.delivery.pipeline import Window
from infra.delivery.providers import Mailer
from domain.delivery import RECORD_WITHIN
from infra.logs import log_event
from infra.services.unit_of_work import ServiceContext

log = logging.getLogger("authledger.worker")

DEFAULT_INFLIGHT = 64


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _run_loop(main: Coroutine[Any, Any, Any]) -> Any:
    """``asyncio.run(main)``, in a thread of its own when the caller's thread already runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main)
    with ThreadPoolExecutor(1, thread_name_prefix="delivery") as one:
        return one.submit(asyncio.run, main).result()


class Worker:
    """Delivers due email with up to ``inflight`` provider calls at once; ``batch`` caps one claim.

    Claims go through ``ctx.engine``, outcomes through ``outcomes`` (another
    pool; by default the same). Appended on connections of their own, each
    connection's pages of ``events`` hold events of one size: on connections
    taking claims and outcomes in turn, a page was left with room for a
    claim whenever an outcome did not fit, and a later batch of claims took
    that room one old page an event (bench/RESULTS.md, "Where the room
    comes from").
    """

    def __init__(
        self, ctx: ServiceContext, mailer: Mailer, *, sender: str, owner: str | None = None,
        inflight: int = DEFAULT_INFLIGHT, batch: int | None = None, poll_seconds: float = 5.0,
        circuit: CircuitPolicy = CircuitPolicy(), outcomes: Engine | None = None,
    ) -> None:
        self.ctx, self.mailer, self.sender = ctx, mailer, sender
        self.outcomes = outcomes or ctx.engine
        self.owner = owner or default_owner()
        self.inflight, self.batch, self.poll_seconds = inflight, batch, poll_seconds
        self.breaker = Breaker(ctx, mailer.name, owner=self.owner, policy=circuit)
        self.endpoint_breakers: dict[str, Breaker] = {}  # one per webhook endpoint, kept across windows
        self.stopping = threading.Event()
        self.delivered: dict[str, int] = {}
        self.stalest_read = 0.0  # seconds; see ``Window.stalest_read``
        self.rereads = 0
        self._lock = threading.Lock()
        self._windows: list[Window] = []  # the windows running now, for the gauges and for stop()

    # -- for metrics -------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Provider calls in flight now."""
        return sum(window.in_flight for window in list(self._windows))

    @property
    def circuit_state(self) -> str:
        """"closed", "open" or "half_open"."""
        return self.breaker.state

    # -- the public entry points -------------------------------------------------

    def claim(self, owner: str, limit: int) -> list[Claim]:
        """Lease up to ``limit`` due messages to ``owner`` and commit."""
        with self.ctx.engine.begin() as connection:
            return claim_due(
                connection, owner=owner, limit=limit, now=self.ctx.clock.now(), policy=self.ctx.delivery_policy,
            )

    def run_once(self, owner: str | None = None) -> int:
        """Claim one group (up to ``batch``, at most the window), deliver and record it; the number claimed."""
        return self._in_a_window(owner or self.owner, self._once)

    def drain(self) -> dict[str, int]:
        """Deliver everything due now, then return the tally of every run so far."""
        started = time.monotonic()
        self._in_a_window(self.owner, self._until_idle)
        log_event(log, "worker drained", owner=self.owner, seconds=round(time.monotonic() - started, 3),
                  **self._freshness(), **self.delivered)
        return dict(self.delivered)

    def run(self) -> None:
        """Deliver until ``stop()`` (or SIGTERM/SIGINT on the main thread); one connection listens for new mail."""
        start_listener(self.ctx.engine, "authledger_outbox", self._wake_all, self.stopping,
                       retry_seconds=self.poll_seconds, log=log)
        log_event(log, "worker started", owner=self.owner, inflight=self.inflight)
        self._in_a_window(self.owner, self._until_stopped)
        log_event(log, "worker stopped", owner=self.owner, **self._freshness(), **self.delivered)

    def _freshness(self) -> dict[str, float]:
        """How fresh the reads behind the sends were: the stalest at a call's start, and how many were redone."""
        return {"stalest_read_ms": round(self.stalest_read * 1000, 1), "rereads": self.rereads}

    def stop(self) -> None:
        self.stopping.set()
        self._wake_all()

    # -- the loops ---------------------------------------------------------------

    def _in_a_window(self, owner: str, loop: Callable[[Window], Awaitable[object]]) -> Any:
        window = Window(
            self.ctx, self.mailer, owner=owner, sender=self.sender, size=self.inflight,
            claim=lambda limit: self.claim(owner, limit), breaker=self.breaker, stopping=self.stopping.is_set,
            outcomes=self.outcomes, endpoint_breakers=self.endpoint_breakers,
        )
        with self._lock:
            self._windows.append(window)
        try:
            return _run_loop(self._bound(window, loop))
        finally:
            window.close()
            with self._lock:
                self._windows.remove(window)
                self.stalest_read = max(self.stalest_read, window.stalest_read)
                self.rereads += window.rereads
                for state, n in window.tally.items():
                    self.delivered[state] = self.delivered.get(state, 0) + n

    async def _bound(self, window: Window, loop: Callable[[Window], Awaitable[object]]) -> object:
        window.bind()
        if threading.current_thread() is threading.main_thread():
            # SIGTERM/SIGINT: stop claiming, finish the sends in flight, give back the rest, return.
            for signum in (signal.SIGTERM, signal.SIGINT):
                asyncio.get_running_loop().add_signal_handler(signum, self.stop)
        try:
            return await loop(window)
        finally:
            await window.webhooks.aclose()

    async def _once(self, window: Window) -> int:
        claimed = await window.step(stopping=self.stopping.is_set(), limit=self.batch)
        while not window.idle:
            await window.wait(RECORD_WITHIN.total_seconds())
            await window.step(stopping=True)
        return claimed

    async def _until_idle(self, window: Window) -> None:
        while True:
            recorded = window.tally.total()
            claimed = await window.step(stopping=self.stopping.is_set(), limit=self.batch)
            if not claimed and window.idle:
                if window.tally.total() != recorded:
                    continue  # outcomes just recorded may have queued webhooks, due now
                return
            if not claimed:
                await window.wait(RECORD_WITHIN.total_seconds())

    async def _until_stopped(self, window: Window) -> None:
        while not (self.stopping.is_set() and window.idle):
            try:
                if await window.step(stopping=self.stopping.is_set(), limit=self.batch):
                    continue
                wait = await self._seconds_to_wait(window)
            except Exception as error:  # noqa: BLE001 - a database outage must not kill the worker: back off, retry
                log_event(log, "worker iteration failed", logging.ERROR, owner=window.owner, error=str(error))
                wait = self.poll_seconds
            if not (self.stopping.is_set() and window.idle):
                await window.wait(wait)

    async def _seconds_to_wait(self, window: Window) -> float:
        if window.in_flight or self.stopping.is_set():
            return RECORD_WITHIN.total_seconds()
        probe = self.breaker.seconds_to_probe()
        if probe is not None:
            return min(probe, self.poll_seconds)
        if self.breaker.state != "closed":
            return self.poll_seconds
        due: datetime | None = await asyncio.to_thread(self._next_due)
        if due is None:
            return self.poll_seconds
        return min(self.poll_seconds, max((due - self.ctx.clock.now()).total_seconds(), 0.01))

    def _next_due(self) -> datetime | None:
        with reading(self.ctx.engine) as connection:
            return next_due(connection)

    def _wake_all(self) -> None:
        with self._lock:
            windows = list(self._windows)
        for window in windows:
            window.wake_threadsafe()
