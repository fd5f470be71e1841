"""The console's case page and outbox page on a 1M-event log, beside the raw SQL they run (issue 15).

    .venv/bin/python bench/console.py [--events 1000000] [--history 300] [--iterations 200] [--quick]

Starts its own embedded PostgreSQL (server defaults: fsync and
synchronous_commit on) and builds the log:

- ``--events`` rows appended by bench/rebuild.py's generator (reset
  requests and their emails, workers trailing them, recipients sealed per
  user), timed so that all of their mail falls in the last 24 hours: the
  outbox chart's worst case, its range scans covering every message of the
  log. The last requests' emails stay queued or leased, so the "stuck" list
  has something to show;
- one user with a long history through the services on a hand-moved clock:
  ``--history`` reset requests 13 minutes apart (each superseding the last),
  each email delivered by a worker, every tenth after one failed attempt;
- 40 abandoned, 40 failed and 40 waiting-for-retry emails of other users, so
  each of the outbox page's lists has rows;
- then the projections the pages read are brought up to date as `serve`
  keeps them: ``email_outbox`` rebuilt, the ``audit_index`` and
  ``delivery_stats`` catch-up projections caught up, and VACUUM ANALYZE.

Measured, same run, same server, interleaved: ``GET /console/case?kind=user``
of the long-history user and ``GET /console/outbox``, each a whole request
through the Starlette app in-process (httpx ASGITransport, a signed-in
review session, so the session check's ``authenticate`` is included), and
each page's SQL replayed raw: every statement the page sent (captured with
SQLAlchemy's ``before_cursor_execute`` during one render), with the same
parameters, on one psycopg connection, no SQLAlchemy, no Python work on the
rows. Figures are p50/p95 over ``--iterations``; budgets: case page ≤ 200 ms,
outbox page ≤ 300 ms of server time.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import httpx
import psycopg
from sqlalchemy import Engine, event, text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import rebuild as generated  # noqa: E402 - after the path set-up

os.environ.setdefault(generated.MASTER_KEY_VARIABLE, generated.BENCH_MASTER_KEY)

from bench.bench_server import start_bench_server  # noqa: E402
from domain.delivery import DeliveryPolicy  # noqa: E402
from domain.reset import RequestReset  # noqa: E402
from domain.tokens import TokenKeys  # noqa: E402
from infra.clock import ManualClock  # noqa: E402
from infra.console.app import Console  # noqa: E402
from infra.db.engine import Database  # noqa: E402
from infra.delivery.providers import (  # noqa: E402
    OutboundEmail, PermanentSendError, ProviderReceipt, RetryableSendError)
from infra.delivery.worker import Worker  # noqa: E402
from infra.http.app import create_app  # noqa: E402
from infra.projector.catchup import catch_up  # noqa: E402
from infra.projector.rebuild import rebuild  # noqa: E402
from infra.projector.registry import projection_named  # noqa: E402
from infra.services.clients import create_client  # noqa: E402
from infra.services.reset import request_reset  # noqa: E402
from infra.services.unit_of_work import ServiceContext  # noqa: E402

DATABASE = "authledger_bench_console"
KEYS = TokenKeys("k2", {"k2": b"bench-console-key-0123456789abcd"})
SENDER = "authledger <no-reply@bench.test>"
LONG_USER = "long-history"
BUDGET_MS = {"case": 200.0, "outbox": 300.0}
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


class BenchMailer:
    """Accepts every email, or refuses the next ``fail_next`` (retryable), or every one for good (``refuse``)."""

    name, idempotent, timeout_seconds = "bench", True, 1.0

    def __init__(self, *, fail_next: int = 0, refuse: bool = False) -> None:
        self.fail_next, self.refuse = fail_next, refuse

    def send(self, email: OutboundEmail) -> ProviderReceipt:
        if self.refuse:
            raise PermanentSendError("550 no such user")
        if self.fail_next:
            self.fail_next -= 1
            raise RetryableSendError("provider busy (421)")
        return ProviderReceipt(self.name, f"bench-{email.message_id}")


def build_log(admin: Engine, app: Engine, url: str, events: int, history: int) -> tuple[ServiceContext, int]:
    """The log described in the module docstring; the services' context (its clock at the end) and its size."""
    end = datetime.now(UTC).replace(microsecond=0)
    log = generated.Log()
    log.start = end - timedelta(hours=20)
    started = time.perf_counter()
    generated.generate(url.replace("postgresql+psycopg://", "postgresql://", 1), log, events)
    print(f"  {events:,} events appended in {time.perf_counter() - started:.0f} s", flush=True)

    clock = ManualClock(end - timedelta(minutes=13 * history + 30))
    ctx = ServiceContext(engine=app, keys=KEYS, clock=clock)
    started = time.perf_counter()
    for n in range(history):
        request_reset(ctx, RequestReset(LONG_USER, "long.history@example.test", client="web"), {"actor": "bench"})
        clock.advance(5)
        Worker(ctx, BenchMailer(fail_next=1 if n % 10 == 0 else 0), sender=SENDER).drain()
        clock.advance(timedelta(minutes=13) - timedelta(seconds=5))
    Worker(ctx, BenchMailer(), sender=SENDER).drain()  # the last retries
    clock.advance(end - clock.now())
    capped = attrs.evolve(ctx, delivery_policy=DeliveryPolicy(max_attempts=1))
    for kind, n in (("abandoned", 40), ("failed", 40), ("retrying", 40)):
        for i in range(n):
            services = capped if kind == "abandoned" else ctx
            request_reset(services, RequestReset(f"{kind}-{i}", f"{kind}{i}@example.test"))
        mailer = BenchMailer(refuse=kind == "failed", fail_next=0 if kind == "failed" else n)
        Worker(capped if kind == "abandoned" else ctx, mailer, sender=SENDER).drain()
    print(f"  the long history ({history} requests) and 120 undelivered emails through the services in "
          f"{time.perf_counter() - started:.0f} s", flush=True)

    started = time.perf_counter()
    rebuild(admin, projection_named("email_outbox"))
    catch_up(admin, [projection_named("audit_index"), projection_named("delivery_stats")], batch_size=5000)
    with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text("VACUUM ANALYZE"))
        size = connection.execute(text("SELECT count(*) FROM events")).scalar_one()
    print(f"  projections rebuilt and caught up, VACUUM ANALYZE, in {time.perf_counter() - started:.0f} s", flush=True)
    return ctx, size


class Captured:
    """The statements some engines send while ``on``: what a page runs."""

    def __init__(self, *engines: Engine) -> None:
        self.on, self.statements = False, []
        for engine in engines:
            event.listen(engine, "before_cursor_execute", self._record)

    def _record(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if self.on:
            self.statements.append((statement, parameters))


async def signed_in(client: httpx.AsyncClient, api_key: str) -> None:
    form = await client.get("/console/sign-in")
    csrf = CSRF.search(form.text)
    assert csrf, form.text
    answer = await client.post("/console/sign-in", data={"csrf": csrf.group(1), "api_key": api_key})
    assert answer.status_code == 303, answer.text


async def page_times(client: httpx.AsyncClient, paths: dict[str, str], iterations: int,
                     raw: dict[str, list[tuple[str, Any]]], conninfo: str) -> dict[str, dict[str, list[float]]]:
    """Each page's server time and its raw SQL's time, interleaved page by page, iteration by iteration."""
    times: dict[str, dict[str, list[float]]] = {name: {"page": [], "sql": []} for name in paths}
    with psycopg.connect(conninfo, autocommit=True) as connection:
        connection.execute("SET role authledger_app")
        for _ in range(iterations):
            for name, path in paths.items():
                started = time.perf_counter()
                answer = await client.get(path)
                times[name]["page"].append(time.perf_counter() - started)
                assert answer.status_code == 200, (path, answer.status_code)
                started = time.perf_counter()
                with connection.cursor() as cursor:
                    for statement, parameters in raw[name]:
                        cursor.execute(statement, parameters)
                        if cursor.description is not None:
                            cursor.fetchall()
                times[name]["sql"].append(time.perf_counter() - started)
    return times


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


async def measure(ctx: ServiceContext, conninfo: str, iterations: int) -> tuple[dict[str, Any], dict[str, int]]:
    captured = Captured(ctx.engine)
    app = create_app(ctx, console=Console(ctx))
    paths = {"case": f"/console/case?kind=user&id={LONG_USER}", "outbox": "/console/outbox"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://bench.test") as client:
        await signed_in(client, create_client(ctx, "bench-review").api_key)
        raw, sizes = {}, {}
        for name, path in paths.items():
            for _ in range(3):  # warm: templates compiled, pools filled, caches hot
                await client.get(path)
            captured.statements, captured.on = [], True
            page = await client.get(path)
            captured.on = False
            assert page.status_code == 200, page.text[:500]
            raw[name], sizes[name] = list(captured.statements), len(page.content)
        if "data-kind=\"lease\"" not in (await client.get(paths["case"])).text:
            raise SystemExit("the case page drew no lease: the long history is missing")
        times = await page_times(client, paths, iterations, raw, conninfo)
    return {name: {"page_p50": pct(t["page"], .5), "page_p95": pct(t["page"], .95), "sql_p50": pct(t["sql"], .5),
                   "sql_p95": pct(t["sql"], .95), "queries": len(raw[name]), "bytes": sizes[name]}
            for name, t in times.items()}, {name: len(raw[name]) for name in raw}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--history", type=int, default=300, help="reset requests of the long-history user")
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="a CI-size run: 40,000 events, 60 requests")
    args = parser.parse_args()
    logging.getLogger("authledger").setLevel(logging.ERROR)  # the bench's own refused sends are not news
    if args.quick:
        args.events, args.history, args.iterations = 40_000, 60, 30

    server = start_bench_server("authledger-bench-console-")
    url = server.create_database(DATABASE)
    database = Database(url)
    admin, app = database.admin_engine(), database.engine(pool_size=5)
    print(f"{server.describe()}; building the log:", flush=True)
    ctx, size = build_log(admin, app, url, args.events, args.history)
    with app.connect() as connection:
        long_events = connection.execute(text(
            "SELECT count(*) FROM audit_index WHERE kind = 'user' AND value = :user"), {"user": LONG_USER}).scalar()
    load = os.getloadavg()[0]
    results, _ = asyncio.run(measure(ctx, url.replace("postgresql+psycopg://", "postgresql://", 1), args.iterations))
    print(f"\nlog: {size:,} events; the long-history user: {args.history} requests, {long_events} events under "
          f"its id in audit_index; {args.iterations} iterations, load {load:.1f} at start\n")
    print("| page | server time p50 (ms) | p95 (ms) | budget (ms) | its raw SQL p50 (ms) | p95 (ms) | statements |"
          " page bytes |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        print(f"| {name} | {r['page_p50']:.1f} | {r['page_p95']:.1f} | {BUDGET_MS[name]:.0f} | {r['sql_p50']:.1f} | "
              f"{r['sql_p95']:.1f} | {r['queries']} | {r['bytes']:,} |")
    admin.dispose()
    app.dispose()


if __name__ == "__main__":
    main()
