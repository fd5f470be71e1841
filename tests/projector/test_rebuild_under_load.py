"""Rebuilding every projection while four threads keep requesting resets and delivering them."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from sqlalchemy import Engine, text

from domain.reset import RequestReset
from infra.projector.catchup import CatchUpRunner
from infra.clock import ManualClock
from infra.projector.registry import projection_named
from infra.projector.rebuild import RebuildResult, rebuild
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from infra.delivery.worker import Worker
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log
from tests.support.traffic import SENDER, no_cooldown
from tests.support.waiting import wait_until

WRITERS = 4
# stream_snapshots and reset_tokens are read by a decision before it writes them (the swap's lock order).
NAMES = ["email_outbox", "reset_tokens", "stream_snapshots", "delivery_stats", "audit_index"]


class Writers:
    """Threads that each request a reset for a new user, then deliver a batch, until told to stop."""

    def __init__(self, ctx: ServiceContext, mailer: RecordingMailer) -> None:
        self.ctx, self.mailer = ctx, mailer
        self.worker = Worker(ctx, mailer, sender=SENDER, batch=1)
        self.stop = threading.Event()
        self.queued: list[str] = []
        self.stalls: list[tuple[float, float]] = []  # (started, seconds) of every write
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(n,)) for n in range(WRITERS)]

    def _timed(self, action: object) -> object:
        started = time.monotonic()
        result = action()  # type: ignore[operator]
        with self._lock:
            self.stalls.append((started, time.monotonic() - started))
        return result

    def _run(self, n: int) -> None:
        i = 0
        try:
            while not self.stop.is_set():
                outcome = self._timed(lambda: request_reset(
                    self.ctx, RequestReset(f"w{n}-{i}", f"w{n}-{i}@example.test")))
                with self._lock:
                    self.queued.append(str(outcome.message_id))  # type: ignore[attr-defined]
                self._timed(lambda: self.worker.run_once(f"w{n}"))
                i += 1
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.errors.append(error)

    def __enter__(self) -> Writers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()

    def longest_stall(self, start: float, end: float) -> float:
        """The longest write that overlapped [start, end]."""
        with self._lock:
            return max((s for t, s in self.stalls if start <= t + s and t <= end), default=0.0)


class WriteDuringCopy:
    """A rebuild's progress callback: on the first page copied, one more reset request, waited for.

    The rebuild does not go on until the write has finished, so a rebuild
    that held writers while it copied would hold this one until the timeout:
    the write finishing proves writers go on during the copy, whatever the
    machine's speed.
    """

    def __init__(self, ctx: ServiceContext, name: str) -> None:
        self.ctx, self.name = ctx, name
        self.finished: bool | None = None  # None until the first page

    def __call__(self, events: int) -> None:
        if self.finished is not None:
            return
        write = threading.Thread(target=request_reset, args=(
            self.ctx, RequestReset(f"during-{self.name}", f"during-{self.name}@example.test")))
        write.start()
        write.join(timeout=60)
        self.finished = not write.is_alive()


def seed(ctx: ServiceContext, requests: int = 1200) -> None:
    """A log long enough that a rebuild takes seconds, written by four threads to save time."""

    def requester(n: int) -> None:
        for i in range(n, requests, WRITERS):
            request_reset(ctx, RequestReset(f"seed-{i % 300}", f"seed{i % 300}@example.test"))

    threads = [threading.Thread(target=requester, args=(n,)) for n in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@pytest.mark.slow
def test_rebuilding_every_projection_under_load_loses_and_doubles_nothing_and_writers_go_on_while_it_copies(
    ctx: ServiceContext, clock: ManualClock, engine: Engine, admin_engine: Engine
) -> None:
    ctx, mailer = no_cooldown(ctx), RecordingMailer()
    seed(ctx)
    runner = CatchUpRunner(engine, batch_size=200, poll_seconds=0.2)
    runner_thread = threading.Thread(target=runner.run)
    runner_thread.start()
    results: list[tuple[float, float, RebuildResult]] = []
    with Writers(ctx, mailer) as writers:
        # Writers alone first: how long a write takes when nothing is rebuilt, printed below.
        wait_until(lambda: len(writers.queued) >= 20, what="twenty writes before any rebuild")
        baseline = writers.longest_stall(0, time.monotonic())
        for name in NAMES:
            probe = WriteDuringCopy(ctx, name)
            started = time.monotonic()
            result = rebuild(admin_engine, projection_named(name), batch_size=50, progress=probe)
            results.append((started, time.monotonic(), result))
            assert probe.finished, f"a write finished while {name} was still being copied: writers are not held"
        after = len(writers.queued)
        wait_until(lambda: len(writers.queued) > after, what="a write after the last rebuild")
    runner.stop()
    runner_thread.join()

    assert not writers.errors, writers.errors
    assert len(writers.queued) > 50, "the writers kept writing during the rebuilds"
    Worker(ctx, mailer, sender=SENDER, inflight=16, batch=20).drain()
    with engine.connect() as connection:
        queued = Counter(connection.execute(text(
            "SELECT payload->>'message_id' FROM events WHERE event_type = 'EmailQueued'")).scalars())
        outbox = connection.execute(text("SELECT count(*) FROM email_outbox")).scalar_one()
    assert all(count == 1 for count in queued.values()), "no message queued twice"
    assert set(writers.queued) <= set(queued), "no write lost"
    assert outbox == len(queued), "one outbox row per queued message"
    assert set(mailer.calls.values()) == {1}, "no message handed to the provider twice"
    assert_projections_match_log(engine)

    print(f"\nlongest write with no rebuild running: {baseline * 1000:.0f} ms")

    # For the reader, not asserted: how long writes took is measured in bench/rebuild.py, not judged here.
    for started, ended, result in results:
        stall = writers.longest_stall(started, ended)
        print(f"{result.projection}: {result.events} events in {result.seconds:.2f} s, "
              f"swap {result.swap_seconds * 1000:.0f} ms, longest write meanwhile {stall * 1000:.0f} ms")
