"""The delivery worker: claim due messages in batches, deliver each, wait for more.

Idle threads sleep until a NOTIFY on ``authledger_outbox`` (sent when mail
is queued), the next retry falls due, or the poll interval passes, whichever
comes first. On stop, a thread finishes the message in hand and gives back
the rest of its batch with ``LeaseReleased``. A thread whose batch a
database error cut short takes that batch up again, once the database is
back, before claiming more, instead of leaving it to wait out its leases.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from datetime import datetime

from infra.db.listen import start_listener
from infra.delivery.send import deliver_batch
from infra.logs import log_event
from infra.delivery.leases import Claim, claim_due, next_due, still_held
from infra.delivery.providers import Mailer
from infra.services.unit_of_work import ServiceContext

log = logging.getLogger("authledger.worker")


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Worker:
    def __init__(
        self, ctx: ServiceContext, mailer: Mailer, *, sender: str, owner: str | None = None,
        batch: int = 10, concurrency: int = 1, poll_seconds: float = 5.0,
    ) -> None:
        self.ctx, self.mailer, self.sender = ctx, mailer, sender
        self.owner = owner or default_owner()
        self.batch, self.concurrency, self.poll_seconds = batch, concurrency, poll_seconds
        self.stopping = threading.Event()
        self._wake = threading.Condition()
        self.delivered: dict[str, int] = {}
        self._count_lock = threading.Lock()
        # Per owner (one per thread): a batch whose delivery a database error
        # cut short. Its leases are still this thread's; left alone they would
        # hold the messages back until the leases run out.
        self._unfinished: dict[str, list[Claim]] = {}

    def claim(self, owner: str) -> list[Claim]:
        with self.ctx.engine.begin() as connection:
            return claim_due(
                connection, owner=owner, limit=self.batch, now=self.ctx.clock.now(),
                policy=self.ctx.delivery_policy,
            )

    def run_once(self, owner: str | None = None) -> int:
        """Claim one batch and deliver it; the number of messages claimed."""
        owner = owner or self.owner
        claims = self._resume(owner) or self.claim(owner)
        try:
            states = deliver_batch(
                self.ctx, claims, self.mailer, owner=owner, sender=self.sender, stopping=self.stopping
            )
        except Exception:
            self._unfinished[owner] = claims
            raise
        with self._count_lock:
            for state in states:
                self.delivered[state] = self.delivered.get(state, 0) + 1
        return len(claims)

    def _resume(self, owner: str) -> list[Claim]:
        """The claims of ``owner``'s cut-short batch that still hold their lease, to deliver them now.

        Fenced by lease token like any outcome: a message recorded before the
        error, or claimed by another worker since, is not ours any more.
        """
        unfinished = self._unfinished.get(owner)
        if not unfinished:
            return []
        with self.ctx.engine.connect() as connection:
            held = still_held(connection, unfinished)
        del self._unfinished[owner]
        return held

    def drain(self) -> dict[str, int]:
        """Deliver everything due now with ``concurrency`` threads, then return the tally."""
        threads = [
            threading.Thread(target=self._drain_thread, args=(f"{self.owner}/{n}",), daemon=True)
            for n in range(self.concurrency)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return dict(self.delivered)

    def _drain_thread(self, owner: str) -> None:
        while not self.stopping.is_set() and self.run_once(owner):
            pass

    def run(self) -> None:
        """Deliver until ``stop()``: threads claiming, one connection listening."""
        start_listener(self.ctx.engine, "authledger_outbox", self._wake_claimers, self.stopping,
                       retry_seconds=self.poll_seconds, log=log)
        threads = [
            threading.Thread(target=self._run_thread, args=(f"{self.owner}/{n}",))
            for n in range(self.concurrency)
        ]
        for thread in threads:
            thread.start()
        log_event(log, "worker started", owner=self.owner, concurrency=self.concurrency, batch=self.batch)
        try:
            for thread in threads:
                thread.join()
        except (KeyboardInterrupt, SystemExit):
            # SIGTERM/SIGINT: stop claiming, let each thread finish the message
            # in hand and release the rest of its batch, then exit cleanly.
            self.stop()
            for thread in threads:
                thread.join()
        log_event(log, "worker stopped", owner=self.owner, **self.delivered)

    def stop(self) -> None:
        self.stopping.set()
        self._wake_claimers()

    def _run_thread(self, owner: str) -> None:
        while not self.stopping.is_set():
            try:
                if self.run_once(owner):
                    continue
                wait = self._seconds_until_next_due()
            except Exception as error:  # a database outage must not kill the worker: back off, retry
                log_event(log, "worker iteration failed", logging.ERROR, owner=owner, error=str(error))
                wait = self.poll_seconds
            with self._wake:
                if not self.stopping.is_set():
                    self._wake.wait(timeout=wait)

    def _seconds_until_next_due(self) -> float:
        with self.ctx.engine.connect() as connection:
            due: datetime | None = next_due(connection)
        if due is None:
            return self.poll_seconds
        return min(self.poll_seconds, max((due - self.ctx.clock.now()).total_seconds(), 0.01))

    def _wake_claimers(self) -> None:
        with self._wake:
            self._wake.notify_all()
