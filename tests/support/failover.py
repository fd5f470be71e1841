"""The failover driver: `serve` and two workers on a multi-host URL, under load, while the primary dies.

Shared by tests/scenarios/test_failover.py and bench/failover.py. Load is a
pool of threads creating password resets through the real API, each with
its own Idempotency-Key, retrying a 503 (or a 409, or a dropped connection)
with the same key and body until it is answered 202, as a client following
the API's rule would. Midway the primary is SIGKILLed; once the API has
answered 503s meanwhile, the standby is promoted (what a failover manager
does); the load goes on until the promoted server has accepted more. Then
every acknowledged request is looked for in the promoted server's log, and
every one of their emails in the Maildir.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg
from attrs import define, field, frozen

from tests.support.cli import cli_env, process_env
from tests.support.keys import TEST_MASTER_KEY
from tests.support.replication import Pair
from tests.support.servers import AUTHLEDGER, start_serve
from tests.support.waiting import wait_until

DATABASE = "authledger"
RETRYABLE = {409, 503}  # in flight, unavailable: the same key again is the API's own advice
SETTINGS = {
    "AUTHLEDGER_MASTER_KEY": TEST_MASTER_KEY, "AUTHLEDGER_LOG_FORMAT": "json", "AUTHLEDGER_POLL_SECONDS": "1",
    "AUTHLEDGER_LEASE_SECONDS": "6", "AUTHLEDGER_LEASE_MARGIN": "1", "AUTHLEDGER_PROVIDER_TIMEOUT": "2",
    "AUTHLEDGER_API_PROCESSES": "2", "AUTHLEDGER_KEY_RATE": "100000", "AUTHLEDGER_KEY_BURST": "100000",
    "AUTHLEDGER_TENANT_RATE": "100000", "AUTHLEDGER_TENANT_BURST": "100000", "AUTHLEDGER_TENANT_IN_FLIGHT": "64",
}


@frozen
class FailoverReport:
    accepted: int  # requests answered 202
    lost: int  # answered 202, yet not in the promoted server's log
    unacknowledged: int  # in the promoted log, yet named by no 202: a key retried after a lost COMMIT made a second
    undelivered: int  # in the log, and their email never reached the Maildir
    duplicated: int  # emails that reached the Maildir more than once
    unavailable: int  # 503s answered between the kill and the first 202 after promotion
    other_answers: dict[int, int]  # any status but 202, 409 and 503, by status (aim: none)
    seconds_to_first_202: float  # from the kill to the first 202 after promotion
    order: list[str]  # what happened, in order: killed, 503, promoted, 202


@define
class Load:
    """Threads creating resets, each retrying its request with the same key until it is answered 202."""

    base: str
    api_key: str
    accepted: dict[str, str] = field(factory=dict)  # idempotency key -> message id
    statuses: list[tuple[float, int]] = field(factory=list)  # (monotonic time, status) of every answer
    stopping: threading.Event = field(factory=threading.Event)
    abandoned: threading.Event = field(factory=threading.Event)  # the run failed: stop retrying, at once
    lock: threading.Lock = field(factory=threading.Lock)

    def count(self, status: int, *, since: float = 0.0) -> int:
        with self.lock:
            return sum(1 for at, answered in self.statuses if answered == status and at >= since)

    def first(self, status: int, *, since: float) -> float | None:
        with self.lock:
            return next((at for at, answered in self.statuses if answered == status and at >= since), None)

    def run(self, threads: int) -> Callable[[], None]:
        pool = ThreadPoolExecutor(threads, thread_name_prefix="load")
        futures = [pool.submit(self._creates) for _ in range(threads)]

        def stop() -> None:
            self.stopping.set()
            for future in futures:
                future.result()  # a thread that raised fails the run here
            pool.shutdown()

        return stop

    def _creates(self) -> None:
        with httpx.Client(base_url=self.base, timeout=30,
                          headers={"Authorization": f"Bearer {self.api_key}"}) as client:
            while not self.stopping.is_set():
                key = uuid.uuid4().hex
                self._until_accepted(client, key, {"user_id": f"u-{key[:12]}", "email": f"{key[:12]}@example.test"})

    def _until_accepted(self, client: httpx.Client, key: str, body: dict[str, str]) -> None:
        while not self.abandoned.is_set():  # not given up once stopping: an unanswered request hides what it met
            try:
                response = client.post("/v1/password-resets", json=body, headers={"Idempotency-Key": key})
            except httpx.TransportError:
                time.sleep(0.05)  # the API process restarting its connection: not an answer
                continue
            with self.lock:
                self.statuses.append((time.monotonic(), response.status_code))
                if response.status_code == 202:
                    self.accepted[key] = response.json()["message_id"]
                    return
            if response.status_code not in RETRYABLE:
                return
            time.sleep(0.05)


def _run(*args: str, env: dict[str, str | None]) -> str:
    done = subprocess.run([AUTHLEDGER, *args], env=process_env(env), capture_output=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


@contextmanager
def _processes(env: dict[str, str | None], work: Path) -> Iterator[str]:
    """`serve` and two workers; the API's base URL. All stopped afterwards."""
    serve, base = start_serve(env, work)
    workers = []
    for n in range(2):
        with (work / f"worker{n}.err").open("wb") as err:
            workers.append(subprocess.Popen([AUTHLEDGER, "worker"], env=process_env(env),
                                            stdout=subprocess.DEVNULL, stderr=err))
    try:
        yield base
    finally:
        for process in [serve, *workers]:
            process.terminate()
        for process in [serve, *workers]:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _message_ids(pair: Pair) -> set[str]:
    """Every message the promoted server's log holds."""
    with psycopg.connect(pair.node_url(pair.standby, DATABASE)) as connection:
        rows = connection.execute("SELECT stream_id FROM events WHERE event_type = 'EmailQueued'").fetchall()
    return {row[0].removeprefix("email:") for row in rows}


def _maildir_counts(maildir: Path) -> Counter[str]:
    """How many copies of each message the Maildir holds (a file's name starts with its message id)."""
    return Counter(path.name.split(":")[0] for folder in ("new", "cur") for path in (maildir / folder).glob("*"))


def create_database(pair: Pair) -> None:
    """authledger's database on the primary (and so on the standby), empty: `db init` comes next."""
    with psycopg.connect(pair.node_url(pair.primary, "postgres"), autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {DATABASE}")


def run_failover(
    pair: Pair, work: Path, *, threads: int = 4, before: int = 40, after: int = 40, stalled: int = 0,
) -> FailoverReport:
    """Load through `serve` on ``pair``'s multi-host URL; kill the primary after ``before`` 202s, promote the
    standby once 503s were answered, go on until ``after`` more 202s; what was lost, sent twice, answered.

    ``stalled``: that many of the ``before`` 202s are answered while the primary's WAL senders are stopped (a
    congested link): an asynchronous standby then lacks them (a synchronous one would make them wait).
    """
    create_database(pair)
    maildir = work / "maildir"
    env = cli_env(pair.url(DATABASE), AUTHLEDGER_DATA_DIR=str(work / "data"), AUTHLEDGER_MAILDIR=str(maildir),
                  **SETTINGS)
    _run("db", "init", env=env)
    api_key = json.loads(_run("clients", "create", "failover", "--scope", "send", "--json", env=env))["api_key"]
    order: list[str] = []
    with _processes(env, work) as base:
        load = Load(base, api_key)
        stop = load.run(threads)
        try:
            wait_until(lambda: len(load.accepted) >= before - stalled, timeout=60,
                       what="requests accepted by the primary")
            if stalled:
                pair.primary.stall_sending()
                wait_until(lambda: len(load.accepted) >= before, timeout=60,
                           what="requests accepted while the link to the standby is stalled")
            pair.primary.kill()
            killed = time.monotonic()
            order.append("killed")
            wait_until(lambda: load.count(503, since=killed) >= 3, timeout=60,
                       what=lambda: f"503s once the primary is gone; answers: {Counter(s for _, s in load.statuses)}")
            order.append("503")
            pair.standby.promote()
            promoted = time.monotonic()
            order.append("promoted")
            accepted_before = len(load.accepted)
            wait_until(lambda: len(load.accepted) >= accepted_before + after, timeout=120,
                       what=lambda: f"requests accepted by the promoted standby; see {work}")
            first_202 = load.first(202, since=promoted)
            assert first_202 is not None
            order.append("202")
        except BaseException:
            load.abandoned.set()  # with no primary, its retries would never end
            raise
        finally:
            stop()
        accepted = dict(load.accepted)
        in_log = _message_ids(pair)
        expected = set(accepted.values()) & in_log
        wait_until(lambda: expected <= set(_maildir_counts(maildir)), timeout=120,
                   what=lambda: f"emails in the Maildir; missing: {sorted(expected - set(_maildir_counts(maildir)))}")
    copies = _maildir_counts(maildir)
    answers = Counter(status for _, status in load.statuses)
    return FailoverReport(
        accepted=len(accepted), lost=len(set(accepted.values()) - in_log),
        unacknowledged=len(in_log - set(accepted.values())),
        undelivered=len(expected - set(copies)), duplicated=sum(1 for n in copies.values() if n > 1),
        unavailable=load.count(503, since=killed) - load.count(503, since=first_202),
        other_answers={status: n for status, n in answers.items() if status not in {202, *RETRYABLE}},
        seconds_to_first_202=first_202 - killed, order=order,
    )
