"""The chaos driver: worker processes delivering while a killer SIGKILLs them at random.

Shared by the test suite (quick form) and bench/chaos.py (long form). The
workers are real `authledger worker` processes; the provider is either an
idempotent HTTP provider (honours Idempotency-Key, like Resend) or a real
SMTP relay that delivers every copy it is given.
"""

from __future__ import annotations

import base64
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from attrs import frozen
from sqlalchemy import Engine, text

from domain.policy import ResetPolicy
from domain.reset import RequestReset
from domain.tokens import TokenKeys
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from infra.eventlog.subject_keys import MASTER_KEY_VARIABLE
from tests.support.http_provider import FakeHttpProvider
from tests.support.smtp_relay import Relay, start_relay

AUTHLEDGER = str(Path(sys.executable).parent / "authledger")
KEY = b"c" * 32
KEYS_ENV = "chaos:" + base64.urlsafe_b64encode(KEY).decode().rstrip("=")
# Recipients are encrypted under a master key; the test suite sets one, a
# bench run uses this throwaway one (the worker processes inherit it).
MASTER_KEY_ENV = "chaos:" + base64.urlsafe_b64encode(b"k" * 32).decode().rstrip("=")


@frozen
class ChaosReport:
    provider: str
    messages: int
    kills: int
    restarts: int
    accepted_sends: int  # emails the provider actually delivered
    duplicates: int  # messages delivered more than once
    lost: int  # messages that never reached `sent`
    max_queued_to_accepted_seconds: float
    duplicates_explained: bool  # every duplicate's log shows a lease that expired mid-send

    def row(self) -> str:
        return (
            f"| {self.provider} | {self.messages} | {self.kills} | {self.restarts} | {self.accepted_sends} | "
            f"{self.duplicates} | {self.lost} | {self.max_queued_to_accepted_seconds:.1f} |"
        )


def queue_messages(engine: Engine, n: int) -> None:
    ctx = ServiceContext(
        engine=engine, keys=TokenKeys("chaos", {"chaos": KEY}),
        reset_policy=ResetPolicy(hourly_limit=1000),
    )
    for i in range(n):
        request_reset(ctx, RequestReset(f"chaos-{i}", f"user{i}@example.test"))


@contextmanager
def _provider(kind: str) -> Iterator[tuple[dict[str, str], object]]:
    if kind == "http":
        with FakeHttpProvider() as provider:
            yield {"AUTHLEDGER_PROVIDER": "http", "AUTHLEDGER_HTTP_PROVIDER_URL": provider.url}, provider
    else:
        relay = Relay()
        controller = start_relay(relay)
        try:
            yield {"AUTHLEDGER_PROVIDER": "smtp", "AUTHLEDGER_SMTP_URL": f"smtp://127.0.0.1:{relay.port}"}, relay
        finally:
            controller.stop()


def _deliveries(kind: str, provider: object) -> Counter[str]:
    if kind == "http":
        assert isinstance(provider, FakeHttpProvider)
        return Counter(provider.sends_by_key)
    assert isinstance(provider, Relay)
    return Counter(str(m["Message-ID"]).strip("<>").split("@")[0] for m in provider.messages())


def _remaining(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(
            text("SELECT count(*) FROM email_outbox WHERE state IN ('pending', 'leased')")).scalar_one()


def run_chaos(
    engine: Engine, database_url: str, *, provider: str, messages: int = 500, workers: int = 4,
    kill_for_seconds: float = 6.0, kill_every: tuple[float, float] = (0.2, 0.5), deadline_seconds: float = 90.0,
    seed: int = 1, inflight: int | None = None,
) -> ChaosReport:
    rng = random.Random(seed)
    os.environ.setdefault(MASTER_KEY_VARIABLE, MASTER_KEY_ENV)
    queue_messages(engine, messages)
    with _provider(provider) as (provider_env, sink):
        env = {
            **os.environ, **provider_env, "DATABASE_URL": database_url, "AUTHLEDGER_TOKEN_KEYS": KEYS_ENV,
            "AUTHLEDGER_LEASE_SECONDS": "4", "AUTHLEDGER_PROVIDER_TIMEOUT": "1", "AUTHLEDGER_LEASE_MARGIN": "1",
            "AUTHLEDGER_POLL_SECONDS": "0.2", "AUTHLEDGER_LOG_FORMAT": "json",
        }

        def start() -> subprocess.Popen[bytes]:
            window = ["--inflight", str(inflight)] if inflight else []  # default: the setting's 64
            return subprocess.Popen(
                [AUTHLEDGER, "worker", "--batch", "5", *window], env=env,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )

        pool = [start() for _ in range(workers)]
        kills = restarts = 0
        started = time.monotonic()
        try:
            while time.monotonic() - started < kill_for_seconds and _remaining(engine):
                time.sleep(rng.uniform(*kill_every))
                victim = rng.randrange(workers)
                pool[victim].send_signal(signal.SIGKILL)
                pool[victim].wait()
                kills += 1
                pool[victim] = start()
                restarts += 1
            while _remaining(engine) and time.monotonic() - started < deadline_seconds:
                time.sleep(0.2)
        finally:
            for process in pool:
                process.send_signal(signal.SIGTERM)
            for process in pool:
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()  # reap it: an unreaped Popen warns when collected, and warnings are errors
        delivered = _deliveries(provider, sink)
    return _report(engine, provider, messages, kills, restarts, delivered)


def _report(
    engine: Engine, provider: str, messages: int, kills: int, restarts: int, delivered: Counter[str]
) -> ChaosReport:
    with engine.connect() as connection:
        rows = connection.execute(text(
            "SELECT message_id::text, state, extract(epoch FROM finished_at - queued_at) AS latency FROM email_outbox"
        )).all()
        duplicated = [key for key, n in delivered.items() if n > 1]
        explained = all(
            connection.execute(text(
                "SELECT count(*) FROM events WHERE stream_id = :s AND event_type = 'LeaseExpired'"
            ), {"s": f"email:{key}"}).scalar_one() > 0
            for key in duplicated
        )
    sent = [row for row in rows if row.state == "sent"]
    return ChaosReport(
        provider=provider, messages=messages, kills=kills, restarts=restarts,
        accepted_sends=sum(delivered.values()), duplicates=len(duplicated),
        lost=messages - len(sent),
        max_queued_to_accepted_seconds=max((float(row.latency) for row in sent), default=0.0),
        duplicates_explained=explained,
    )

