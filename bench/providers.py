"""Delivery against providers that take time and go down: a real `authledger worker` beside pgqueuer (issue 12).

    .venv/bin/python bench/providers.py [--quick] [--messages 5000] [--outage 60] [--burst 2000]
        [--smtp-messages 2000] [--only latency|outage|smtp]

Starts its own embedded PostgreSQL (the template of bench/delivery.py:
schema.sql and pgqueuer's schema) and, each in its own process, loopback
provider stubs from bench/provider_stubs.py. Every run gets a fresh database.

1. Latency: an HTTP stub answering after 100 ms, then 300 ms. N reset emails
   are queued (not timed), then ONE `authledger worker --once` process with
   default settings (window AUTHLEDGER_DELIVERY_INFLIGHT=64, the HttpMailer
   built from AUTHLEDGER_PROVIDER=http) drains them. Rate = N / (first
   LeaseClaimed.claimed_at .. last ProviderAccepted.accepted_at), read from
   the log, so process start-up is not counted. queued→accepted is
   EmailQueued.available_at to ProviderAccepted.accepted_at; as all N are
   queued before the worker starts, it is mostly time spent waiting behind
   the backlog, so claimed→accepted (the last LeaseClaimed to the accept) is
   shown as well. Baselines in the same run: the window's bound (window ÷
   latency) and pgqueuer (asyncpg, uvloop, one process) running the
   equivalent job, an async POST of the same JSON to the same stub through
   an httpx.AsyncClient, with 64 jobs in flight.
2. Outage: one `authledger worker` (run mode, default settings) and the
   100 ms stub; a burst of emails is queued while the worker runs; one second
   in, the stub goes down (listening socket closed, connections dropped:
   "connection refused") for the outage's length, then comes back. Reported:
   lost emails, time from recovery to the last accept, attempts per email.
3. SMTP: aiosmtpd taking 20 ms per message; one `authledger worker --once`
   at the default window; emails/s and messages per connection.

The stub's CPU share (its CPU time over the measured interval's wall time)
is shown so that a load generator at its limit would be seen.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import json
import multiprocessing
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from uuid import uuid4

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.delivery import (  # after the path set-up
    KEYS, SENDER, TEMPLATE, Server, _code_version, _pgqueuer_queries, _prepare_template, _print_table, _queue_resets,
)
from bench.provider_stubs import Stub
from infra.db.embedded import start_embedded
from infra.db.engine import Database

AUTHLEDGER = str(Path(sys.executable).parent / "authledger")
WINDOW = 64  # AUTHLEDGER_DELIVERY_INFLIGHT's default; pgqueuer gets the same concurrency
TOKEN_KEYS = "bench:" + base64.urlsafe_b64encode(KEYS.keys["bench"]).decode()
# The body pgqueuer POSTs: the shape and about the size of a rendered reset email.
JOB_BODY = {"from": SENDER, "to": "user-000000@example.com", "subject": "Reset your password",
            "text": "Someone asked to reset your password. " * 8, "html": "<p>Someone asked to reset it.</p>" * 16}

TIMINGS = """
    WITH queued AS (SELECT stream_id, (payload->>'available_at')::timestamptz AS at
                      FROM events WHERE event_type = 'EmailQueued'),
         claimed AS (SELECT stream_id, max((payload->>'claimed_at')::timestamptz) AS at, min(
                            (payload->>'claimed_at')::timestamptz) AS first
                       FROM events WHERE event_type = 'LeaseClaimed' GROUP BY stream_id),
         accepted AS (SELECT stream_id, (payload->>'accepted_at')::timestamptz AS at
                        FROM events WHERE event_type = 'ProviderAccepted'),
         each AS (SELECT extract(epoch FROM a.at - q.at) AS waited, extract(epoch FROM a.at - c.at) AS served,
                         c.first, a.at
                    FROM accepted a JOIN queued q USING (stream_id) JOIN claimed c USING (stream_id))
    SELECT count(*), extract(epoch FROM min(first)), extract(epoch FROM max(at)),
           percentile_cont(0.5) WITHIN GROUP (ORDER BY waited), percentile_cont(0.99) WITHIN GROUP (ORDER BY waited),
           percentile_cont(0.5) WITHIN GROUP (ORDER BY served), percentile_cont(0.99) WITHIN GROUP (ORDER BY served)
      FROM each
"""


class Run:
    """A fresh database copied from the template, dropped on exit."""

    def __init__(self, server: Server) -> None:
        self.server, self.name = server, f"run_{uuid4().hex[:12]}"

    def __enter__(self) -> Run:
        self.server.execute(f"CREATE DATABASE {self.name} TEMPLATE {TEMPLATE}")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.execute(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")

    def sql(self, statement: str) -> list[tuple]:
        return self.server.execute(statement, self.name)

    def queue(self, messages: int, chunk: int = 500) -> None:
        _queue_resets(Database(self.server.url(self.name, "postgresql+psycopg")).engine(pool_size=1), messages, chunk)

    def worker(self, provider_env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, **provider_env, "DATABASE_URL": self.server.url(self.name, "postgresql+psycopg"),
               "AUTHLEDGER_TOKEN_KEYS": TOKEN_KEYS, "AUTHLEDGER_LOG_FORMAT": "json"}
        env.pop("AUTHLEDGER_DELIVERY_INFLIGHT", None)  # the default window, whatever the caller's shell says
        return subprocess.Popen([AUTHLEDGER, "worker", *args], env=env, stdout=subprocess.DEVNULL,
                                stderr=log.open("wb"))

    def outbox(self) -> dict[str, int]:
        return dict(self.sql("SELECT state, count(*) FROM email_outbox GROUP BY state"))

    def timings(self) -> dict[str, float]:
        n, first, last, w50, w99, s50, s99 = self.sql(TIMINGS)[0]
        return {"accepted": n, "first_claim": float(first or 0), "last_accept": float(last or 0),
                "rate": n / (float(last) - float(first)) if n else 0.0,
                "waited_p50": w50, "waited_p99": w99, "served_p50": s50, "served_p99": s99}


def _http_env(stub: Stub) -> dict[str, str]:
    return {"AUTHLEDGER_PROVIDER": "http", "AUTHLEDGER_HTTP_PROVIDER_URL": f"http://127.0.0.1:{stub.port}/emails"}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _drain_once(run: Run, provider_env: dict[str, str], label: str) -> tuple[float, float]:
    """Run `authledger worker --once` to the end; its wall and CPU seconds."""
    log = Path(tempfile.mkstemp(prefix=f"authledger-{label}-", suffix=".log")[1])
    cpu, start = _children_cpu(), time.monotonic()
    process = run.worker(provider_env, log, "--once")
    if process.wait(timeout=900) != 0:
        raise RuntimeError(f"{label}: worker exited {process.returncode}; log {log}:\n{log.read_text()[-3000:]}")
    log.unlink()
    return time.monotonic() - start, _children_cpu() - cpu


def startup_cpu(server: Server) -> float:
    """CPU seconds of `authledger worker --once` with nothing to deliver: start-up, taken off per-email CPU."""
    with Run(server) as run:
        return _drain_once(run, {"AUTHLEDGER_PROVIDER": "http", "AUTHLEDGER_HTTP_PROVIDER_URL": "http://127.0.0.1:9/"},
                           "startup")[1]


def _stub_share(before: dict[str, Any], after: dict[str, Any], seconds: float) -> float:
    return (after["cpu"] - before["cpu"]) / seconds


def authledger_http(server: Server, delay: float, messages: int, startup: float) -> dict[str, Any]:
    stub = Stub("http", delay)
    try:
        with Run(server) as run:
            run.queue(messages)
            run.sql("CHECKPOINT")
            env = _http_env(stub)
            before = stub.command("stats")
            wall, cpu = _drain_once(run, env, "latency")
            after = stub.command("stats")
            result = run.timings()
            states = run.outbox()
        if states != {"sent": messages} or after["keys"] != messages or result["accepted"] != messages:
            raise RuntimeError(f"authledger {delay}s: outbox {states}, stub {after}, accepted {result['accepted']}")
        busy = result["last_accept"] - result["first_claim"]
        return result | {"wall": wall, "cpu_us": (cpu - startup) * 1e6 / messages, "peak": after["peak_in_flight"],
                         "repeats": after["requests"] - messages, "connections": after["connections"],
                         "stub_share": _stub_share(before, after, busy)}
    finally:
        stub.stop()


# --- pgqueuer: the same job, an async POST of the email's JSON to the same stub ---

def _pgqueuer_process(url: str, stub_url: str, one_client: bool, results: Any) -> None:
    import httpx
    import uvloop
    from pgqueuer import QueueManager
    from pgqueuer.types import QueueExecutionMode

    from infra.delivery.providers.http_clients import ClientGroup

    async def main() -> dict[str, Any]:
        queries, connection = await _pgqueuer_queries(url)
        manager = QueueManager(queries)
        if one_client:  # the obvious job: one httpx client holding the window (slow: encode/httpx#3215)
            limits = httpx.Limits(max_connections=WINDOW, max_keepalive_connections=WINDOW)
            client: Any = httpx.AsyncClient(limits=limits, timeout=10.0)
        else:  # the HTTP client code authledger's HttpMailer uses, so only the queue differs
            client = ClientGroup({"timeout": httpx.Timeout(10.0)}, WINDOW)
        spans: list[tuple[float, float, float]] = []  # (created, started, done) epoch seconds

        @manager.entrypoint("post", concurrency_limit=WINDOW)
        async def post(job: Any) -> None:
            started = time.time()
            body = json.loads(job.payload)
            response = await client.post(stub_url, json=body["email"], headers={"Idempotency-Key": body["key"]})
            response.raise_for_status()
            spans.append((job.created.timestamp(), started, time.time()))

        cpu = time.process_time()
        await manager.run(batch_size=WINDOW // 2, max_concurrent_tasks=WINDOW, mode=QueueExecutionMode.drain)
        cpu = time.process_time() - cpu
        await client.aclose()
        await connection.close()
        return {"spans": spans, "cpu": cpu}

    results.put(uvloop.run(main()))


def pgqueuer_http(server: Server, delay: float, messages: int, *, one_client: bool = False) -> dict[str, Any]:
    import asyncio

    stub = Stub("http", delay)
    try:
        with Run(server) as run:
            async def enqueue() -> None:
                queries, connection = await _pgqueuer_queries(server.url(run.name))
                payloads = [json.dumps({"key": str(uuid4()), "email": JOB_BODY}).encode() for _ in range(messages)]
                await queries.enqueue(["post"] * messages, payloads, [0] * messages)
                await connection.close()

            asyncio.run(enqueue())
            run.sql("CHECKPOINT")
            before = stub.command("stats")
            context = multiprocessing.get_context("spawn")
            results = context.Queue()
            process = context.Process(target=_pgqueuer_process,
                                      args=(server.url(run.name), f"http://127.0.0.1:{stub.port}/emails", one_client,
                                            results))
            process.start()
            outcome = results.get(timeout=900)
            process.join(timeout=30)
            after = stub.command("stats")
            left = run.sql("SELECT count(*) FROM pgqueuer")[0][0]
        spans = outcome["spans"]
        if left or len(spans) != messages or after["keys"] - before["keys"] != messages:
            raise RuntimeError(f"pgqueuer {delay}s: {left} jobs left, {len(spans)} done, stub {after}")
        first, last = min(s for _, s, _ in spans), max(d for _, _, d in spans)
        waited = sorted(d - c for c, _, d in spans)
        served = sorted(d - s for _, s, d in spans)
        return {"rate": messages / (last - first), "waited_p50": _pct(waited, 0.5), "waited_p99": _pct(waited, 0.99),
                "served_p50": _pct(served, 0.5), "served_p99": _pct(served, 0.99),
                "cpu_us": outcome["cpu"] * 1e6 / messages,
                "peak": after["peak_in_flight"], "stub_share": _stub_share(before, after, last - first)}
    finally:
        stub.stop()


def _pct(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --- the clients alone, no queue: what the provider call itself costs ---

def http_client_alone(delay: float, messages: int) -> dict[str, Any]:
    """``messages`` POSTs of the job's JSON through the ClientGroup HttpMailer uses, 64 at a time, nothing else."""
    import asyncio

    import httpx
    import uvloop

    from infra.delivery.providers.http_clients import ClientGroup

    stub = Stub("http", delay)
    try:
        async def main() -> tuple[float, float]:
            client, gate = ClientGroup({"timeout": httpx.Timeout(10.0)}, WINDOW), asyncio.Semaphore(WINDOW)
            url = f"http://127.0.0.1:{stub.port}/emails"

            async def post(n: int) -> None:
                async with gate:
                    response = await client.post(url, json=JOB_BODY, headers={"Idempotency-Key": f"alone-{n}"})
                    response.raise_for_status()

            start, cpu = time.monotonic(), time.process_time()
            await asyncio.gather(*(post(n) for n in range(messages)))
            elapsed, cpu = time.monotonic() - start, time.process_time() - cpu
            await client.aclose()
            return elapsed, cpu

        before = stub.command("stats")
        elapsed, cpu = uvloop.run(main())
        after = stub.command("stats")
    finally:
        stub.stop()
    return {"rate": messages / elapsed, "cpu_us": cpu * 1e6 / messages, "peak": after["peak_in_flight"],
            "stub_share": _stub_share(before, after, elapsed)}


def smtp_client_alone(messages: int) -> dict[str, Any]:
    """``messages`` sends with smtplib from 64 threads, each on one kept session: the SMTP client's own ceiling."""
    import smtplib
    from concurrent.futures import ThreadPoolExecutor

    stub = Stub("smtp", 0.02)
    message = (f"From: {SENDER}\r\nTo: user@example.com\r\nSubject: Reset your password\r\n\r\n"
               + JOB_BODY["text"] + "\r\n" + JOB_BODY["html"] + "\r\n").encode()
    local = threading.local()

    def send(_: int) -> None:
        if not hasattr(local, "session"):
            local.session = smtplib.SMTP("127.0.0.1", stub.port, local_hostname="bench.test")
        local.session.sendmail(SENDER, ["user@example.com"], message)

    try:
        before = stub.command("stats")
        start, cpu = time.monotonic(), time.process_time()
        with ThreadPoolExecutor(WINDOW) as pool:
            list(pool.map(send, range(messages)))
        elapsed, cpu = time.monotonic() - start, time.process_time() - cpu
        after = stub.command("stats")
    finally:
        stub.stop()
    return {"rate": messages / elapsed, "cpu_us": cpu * 1e6 / messages,
            "per_connection": messages / max(after["connections"] - before["connections"], 1),
            "stub_share": _stub_share(before, after, elapsed)}


# --- the outage ---

def outage(server: Server, messages: int, down_for: float) -> dict[str, Any]:
    stub = Stub("http", 0.1)
    log = Path(tempfile.mkstemp(prefix="authledger-outage-", suffix=".log")[1])
    try:
        with Run(server) as run:
            env = _http_env(stub)
            worker = run.worker(env, log)
            time.sleep(3)  # the worker is up and polling
            burst = threading.Thread(target=run.queue, args=(messages, 50))
            burst.start()
            time.sleep(1)
            down_stats = stub.command("down")
            down_at = time.time()
            time.sleep(down_for)
            stub.command("up")
            up_at = time.time()
            burst.join()
            deadline = time.monotonic() + max(120.0, down_for * 2)
            while run.outbox().keys() - {"sent"} and time.monotonic() < deadline:
                time.sleep(0.5)
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=30)
            after = stub.command("stats")
            states = run.outbox()
            attempts_max, attempts_mean = run.sql("SELECT max(attempt_count), avg(attempt_count) FROM email_outbox")[0]
            last = run.timings()["last_accept"]
            first_after = run.sql(
                f"SELECT extract(epoch FROM min((payload->>'accepted_at')::timestamptz)) FROM events "
                f"WHERE event_type = 'ProviderAccepted' "
                f"AND (payload->>'accepted_at')::timestamptz > to_timestamp({up_at})")[0][0]
            types = dict(run.sql("SELECT event_type, count(*) FROM events GROUP BY event_type ORDER BY 2 DESC"))
            accepted_in_outage = run.sql(
                f"SELECT count(*) FROM events WHERE event_type = 'ProviderAccepted' AND "
                f"(payload->>'accepted_at')::timestamptz > to_timestamp({down_at}) "
                f"AND (payload->>'accepted_at')::timestamptz < to_timestamp({up_at})")[0][0]
        return {"messages": messages, "down_for": down_for, "lost": messages - states.get("sent", 0),
                "states": states, "accepted_before": down_stats["keys"], "accepted_in_outage": accepted_in_outage,
                "recovery": last - up_at, "first_accept_after_recovery": float(first_after) - up_at,
                "attempts_max": attempts_max, "attempts_mean": float(attempts_mean),
                "requests_per_email": after["requests"] / messages, "repeated_keys": after["repeated_keys"],
                "events": types, "log": str(log)}
    finally:
        stub.stop()


# --- SMTP ---

def smtp(server: Server, messages: int, startup: float) -> dict[str, Any]:
    stub = Stub("smtp", 0.02)
    try:
        with Run(server) as run:
            run.queue(messages)
            run.sql("CHECKPOINT")
            before = stub.command("stats")
            _, cpu = _drain_once(run, {"AUTHLEDGER_PROVIDER": "smtp",
                                          "AUTHLEDGER_SMTP_URL": f"smtp://127.0.0.1:{stub.port}"}, "smtp")
            after = stub.command("stats")
            result = run.timings()
            states = run.outbox()
        got = after["messages"] - before["messages"]
        if states != {"sent": messages} or got != messages:
            raise RuntimeError(f"smtp: outbox {states}, relay got {got}")
        connections = after["connections"] - before["connections"]
        busy = result["last_accept"] - result["first_claim"]
        return result | {"cpu_us": (cpu - startup) * 1e6 / messages, "connections": connections,
                         "per_connection": got / max(connections, 1), "stub_share": _stub_share(before, after, busy)}
    finally:
        stub.stop()


# --- driver ---

def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000, help="emails per latency run (default 5000)")
    parser.add_argument("--burst", type=int, default=2000, help="emails in the outage's burst (default 2000)")
    parser.add_argument("--outage", type=float, default=60.0, help="seconds the stub is down (default 60)")
    parser.add_argument("--smtp-messages", type=int, default=2000, help="emails in the SMTP run (default 2000)")
    parser.add_argument("--quick", action="store_true", help="500 emails, a 15 s outage over 300, 300 over SMTP")
    parser.add_argument("--only", choices=("latency", "outage", "smtp"), help="run one part")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.burst, args.outage, args.smtp_messages = 500, 300, 15.0, 300

    os.environ.setdefault("AUTHLEDGER_MASTER_KEY", f"bench:{base64.urlsafe_b64encode(os.urandom(32)).decode()}")
    data_dir = Path(tempfile.mkdtemp(prefix="authledger-bench-providers-"))
    atexit.register(shutil.rmtree, data_dir, ignore_errors=True)  # runs after the server's own exit hook
    server = Server(start_embedded(data_dir))
    settings = _prepare_template(server)
    print(f"PostgreSQL {settings.pop('server_version')} (embedded); "
          + ", ".join(f"{name}={value}" for name, value in settings.items()))
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} at start; "
          f"code: {_code_version()}; window {WINDOW}\n", flush=True)

    startup = startup_cpu(server)
    print(f"worker start-up CPU (taken off CPU per email): {startup:.2f} s", flush=True)
    if args.only in (None, "latency"):
        rows = []
        for delay in (0.1, 0.3):
            ours = authledger_http(server, delay, args.messages, startup)
            theirs = pgqueuer_http(server, delay, args.messages)
            sides = [("authledger worker", ours), ("pgqueuer", theirs)]
            sides.append(("httpx ClientGroup alone, no queue", http_client_alone(delay, args.messages)))
            if delay == 0.1:
                naive = pgqueuer_http(server, delay, args.messages, one_client=True)
                sides.append(("pgqueuer, one httpx client", naive))
            bound = WINDOW / delay
            for name, r in sides:
                latency = [f"{_ms(r[f'{what}_p50'])} / {_ms(r[f'{what}_p99'])}" if f"{what}_p50" in r else "-"
                           for what in ("waited", "served")]
                rows.append([f"{delay * 1000:.0f} ms", name, f"{r['rate']:,.0f}", f"{r['rate'] / bound:.2f}",
                             f"{ours['rate'] / r['rate']:.2f}", *latency, str(r["peak"]),
                             f"{r['cpu_us']:,.0f}", f"{r['stub_share']:.0%}"])
            print(f"  {delay * 1000:.0f} ms: authledger {ours['rate']:,.0f}/s (connections {ours['connections']}, "
                  f"repeated requests {ours['repeats']}, worker wall {ours['wall']:.1f}s), pgqueuer "
                  f"{theirs['rate']:,.0f}/s", flush=True)
        print(f"\nlatency, {args.messages} emails queued, one process, window {WINDOW}")
        _print_table(["stub", "side", "emails/s", "÷ bound", "authledger ÷ this", "queued→accepted p50/p99 ms",
                      "claimed→accepted p50/p99 ms", "peak in flight", "CPU µs/email", "stub CPU"], rows)

    if args.only in (None, "outage"):
        o = outage(server, args.burst, args.outage)
        print(f"\noutage: {o['messages']} emails queued over the outage's start, stub down {o['down_for']:.0f} s "
              f"(connection refused)")
        for key in ("lost", "states", "accepted_before", "accepted_in_outage", "first_accept_after_recovery",
                    "recovery", "attempts_max",
                    "attempts_mean", "requests_per_email", "repeated_keys", "events", "log"):
            value = o[key]
            print(f"  {key}: {value:.2f}" if isinstance(value, float) else f"  {key}: {value}")

    if args.only in (None, "smtp"):
        s = smtp(server, args.smtp_messages, startup)
        print(f"\nsmtp, aiosmtpd 20 ms per message, {args.smtp_messages} emails, window {WINDOW}: "
              f"{s['rate']:,.0f} emails/s ({s['rate'] / (WINDOW / 0.02):.2f}× the window's bound of "
              f"{WINDOW / 0.02:,.0f}/s), {s['connections']} connections, {s['per_connection']:,.0f} messages per "
              f"connection, claimed→accepted p50/p99 {_ms(s['served_p50'])} / {_ms(s['served_p99'])} ms, "
              f"worker CPU {s['cpu_us']:,.0f} µs/email, relay CPU {s['stub_share']:.0%}")
        a = smtp_client_alone(args.smtp_messages)
        print(f"smtplib alone, 64 threads on kept sessions, no queue: {a['rate']:,.0f} emails/s "
              f"(authledger ÷ this {s['rate'] / a['rate']:.2f}), {a['per_connection']:,.0f} messages per connection, "
              f"client CPU {a['cpu_us']:,.0f} µs/email, relay CPU {a['stub_share']:.0%}")
    print(f"\nload at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
