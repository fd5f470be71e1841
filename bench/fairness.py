"""Fairness between tenants: tenant B's create latency alone and during tenant A's flood, same run (issue 36).

    PYTHONPATH=$PWD .venv/bin/python bench/fairness.py [--single 300] [--flood 16] [--processes N] [--quick]

Starts its own embedded PostgreSQL, makes tenants acme (A), shop (B) and
refused (C) with send keys, then runs the real `authledger serve --inflight
0 --processes N` twice on that database:

1. **Turns only**: the request rates raised out of reach
   (AUTHLEDGER_KEY_RATE and AUTHLEDGER_TENANT_RATE at 100,000), so that
   every one of A's requests is accepted and only the per-tenant turns
   (AUTHLEDGER_TENANT_IN_FLIGHT, 2 per process, and 1 while another tenant
   is active there: AUTHLEDGER_TENANT_IN_FLIGHT_SHARED) stand between A's
   flood and B. The hard case.
2. **As shipped**: every fairness setting at its default. A's flood, past
   its tenant's rate, is mostly refused (429) cheaply. Here too: tenant C's
   refused creates (its key's burst spent, so each is answered 429 by the
   per-key rate) beside C's accepted creates.

In each, B is one client making creates one at a time, paced at
``--pace`` a second (default 20: within the default per-key rate of 50, so
that B is never refused): ``--single`` creates alone, then as many during
A's flood of ``--flood`` requests in flight (one keep-alive connection and
one key each, so that no one key's rate refuses A in the first part), then
alone again. The figure is B's p50 during the flood over the median of B's
two p50s alone; the aim is at most 2.5. Every request is a new user and a
new address, so no per-user or per-address limit is met.

The refusal cost: C's accepted creates (paced as B's) and C's refused ones
(as fast as one client sends, after its burst is spent; the few that a
refilled token lets through are left out), p50 each, with the API
processes' CPU over each phase divided by its requests.

Latency is the client's, from sending to the whole answer. The load
generator is bench/api.py's plain HTTP/1.1 client on uvloop. The machine's
load average is printed at the start and at the end: on a shared machine
the figures are noisy, and the ratio, taken in one run, is the result.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from uuid import uuid4

import psycopg
import uvloop
from sqlalchemy import create_engine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.api import (  # after the path set-up
    KEY,
    MASTER_KEY,
    Connection,
    _start_server,
    _ms,
    _tree_cpu_seconds,
    _url,
)
from bench.bench_server import start_bench_server
from domain.tokens import TokenKeys
from infra.config.settings import default_api_processes
from infra.db.schema import init_schema
from infra.services.clients import create_client
from infra.services.tenants import create_tenant
from infra.services.unit_of_work import ServiceContext

DATABASE = "bench_fairness"
AIM = 2.5
OUT_OF_REACH = {"AUTHLEDGER_KEY_RATE": "100000", "AUTHLEDGER_KEY_BURST": "100000",
                "AUTHLEDGER_TENANT_RATE": "100000", "AUTHLEDGER_TENANT_BURST": "100000"}


def _prepare(uri: str, flood: int) -> dict[str, list[str]]:
    """The bench database with tenants acme, shop and refused; their send keys (acme: one per flood connection)."""
    with psycopg.connect(_url(uri, "postgres"), autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {DATABASE}")
    admin = create_engine(_url(uri, DATABASE, "postgresql+psycopg"))
    init_schema(admin)
    admin.dispose()
    engine = create_engine(_url(uri, DATABASE, "postgresql+psycopg"),
                           connect_args={"options": "-c role=authledger_app"})
    ctx = ServiceContext(engine=engine, keys=TokenKeys("bench", {"bench": KEY}))
    keys: dict[str, list[str]] = {}
    for tenant, count in (("acme", flood), ("shop", 1), ("refused", 1)):
        create_tenant(ctx, tenant)
        keys[tenant] = [create_client(ctx, f"{tenant}-{n}", tenant=tenant, scopes=["send"]).api_key
                        for n in range(count)]
    engine.dispose()
    return keys


async def _create(connection: Connection, tenant: str) -> tuple[int, float]:
    """One reset create for a new user and address: its status and latency in seconds."""
    user = uuid4().hex[:12]
    started = time.perf_counter()
    status, body = await connection.request(
        "POST", "/v1/password-resets", {"user_id": f"u-{user}", "email": f"u-{user}@{tenant}.example.com"},
        f"Idempotency-Key: {uuid4().hex}\r\n")
    if status not in (202, 429):
        raise SystemExit(f"expected 202 or 429, got {status}: {body[:300]!r}")
    return status, time.perf_counter() - started


async def _paced(connection: Connection, tenant: str, count: int, pace: float) -> list[tuple[int, float]]:
    """``count`` creates one at a time, each started 1/``pace`` s after the one before (or at once if late)."""
    answers, interval, next_start = [], 1 / pace, time.perf_counter()
    for _ in range(count):
        await asyncio.sleep(max(0.0, next_start - time.perf_counter()))
        next_start += interval
        answers.append(await _create(connection, tenant))
    return answers


def _accepted_p50(answers: list[tuple[int, float]], who: str) -> float:
    accepted = [latency for status, latency in answers if status == 202]
    if len(accepted) < len(answers):
        raise SystemExit(f"{who}: {len(answers) - len(accepted)} of {len(answers)} creates were refused")
    return _ms(accepted, 50)


async def _fairness(port: int, keys: dict[str, list[str]], single: int, pace: float) -> dict[str, float]:
    """B alone, B during A's flood, B alone again: p50s, and A's accepted and refused counts."""
    b = await Connection.open(port, keys["shop"][0])
    flooders: list[Connection] = []  # opened when the flood starts: the server closes a connection left idle
    flood_answers: list[int] = []
    stop = asyncio.Event()

    async def flood(connection: Connection) -> None:
        while not stop.is_set():
            flood_answers.append((await _create(connection, "acme"))[0])

    try:
        await _paced(b, "shop", 10, pace)  # warm-up: the key is cached, the connection's process has run a create
        alone_before = _accepted_p50(await _paced(b, "shop", single, pace), "B alone")
        flooders += [await Connection.open(port, key) for key in keys["acme"]]
        tasks = [asyncio.create_task(flood(c)) for c in flooders]
        await _paced(b, "shop", 10, pace)  # the flood reaches its full depth
        during = _accepted_p50(await _paced(b, "shop", single, pace), "B during the flood")
        stop.set()
        await asyncio.gather(*tasks)
        alone_after = _accepted_p50(await _paced(b, "shop", single, pace), "B alone, after")
    finally:
        for connection in [b, *flooders]:
            connection.close()
    alone = statistics.median([alone_before, alone_after])
    return {"alone_before": alone_before, "alone_after": alone_after, "during": during, "ratio": during / alone,
            "flood_accepted": flood_answers.count(202), "flood_refused": flood_answers.count(429)}


async def _refusal_cost(port: int, key: str, single: int, pace: float, server_pid: int) -> dict[str, float]:
    """C's accepted creates (paced) and then refused ones (its burst spent): p50 and server CPU ms a request each."""
    c = await Connection.open(port, key)
    try:
        await _paced(c, "refused", 10, pace)
        cpu = _tree_cpu_seconds(server_pid)
        accepted = await _paced(c, "refused", single, pace)
        accepted_cpu = (_tree_cpu_seconds(server_pid) - cpu) / single * 1000
        while (await _create(c, "refused"))[0] != 429:  # spend the key's burst
            pass
        cpu = _tree_cpu_seconds(server_pid)
        refused = [await _create(c, "refused") for _ in range(single)]
        refused_cpu = (_tree_cpu_seconds(server_pid) - cpu) / single * 1000
    finally:
        c.close()
    refusals = [latency for status, latency in refused if status == 429]
    return {"accepted_p50": _accepted_p50(accepted, "C accepted"), "accepted_cpu": accepted_cpu,
            "refused_p50": _ms(refusals, 50), "refused_cpu": refused_cpu, "refused": len(refusals),
            "let_through": len(refused) - len(refusals)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--single", type=int, default=300, help="B's creates in each phase (default 300)")
    parser.add_argument("--flood", type=int, default=16, help="A's requests in flight (default 16)")
    parser.add_argument("--pace", type=float, default=20.0, help="B's and C's creates a second (default 20)")
    parser.add_argument("--processes", type=int, default=default_api_processes(),
                        help="`serve --processes` (default: serve's own, one for each core, at most 4)")
    parser.add_argument("--quick", action="store_true", help="60 creates a phase: a smoke test")
    args = parser.parse_args()
    single = 60 if args.quick else args.single

    data_dir = Path(tempfile.mkdtemp(prefix="authledger-bench-fairness-"))
    atexit.register(shutil.rmtree, data_dir, ignore_errors=True)  # after the embedded server's exit hook
    uri = start_bench_server("authledger-bench-fairness-", data_dir=data_dir / "pg").uri
    keys = _prepare(uri, args.flood)
    os.environ.setdefault("AUTHLEDGER_MASTER_KEY", MASTER_KEY)
    loads = [os.getloadavg()[0]]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {loads[0]:.2f} at start, "
          f"Python {platform.python_version()}")
    print(f"server: authledger serve --inflight 0 --processes {args.processes}; B and C paced at {args.pace:g} "
          f"creates a second, {single} a phase; A: {args.flood} in flight\n")
    uvloop.install()
    results, cost = {}, {}
    for part, extra in (("turns only (rates out of reach)", OUT_OF_REACH), ("as shipped (every default)", {})):
        server, port = _start_server(_url(uri, DATABASE), data_dir, args.processes, extra)
        try:
            results[part] = asyncio.run(_fairness(port, keys, single, args.pace))
            if not extra:
                cost = asyncio.run(_refusal_cost(port, keys["refused"][0], single, args.pace, server.pid))
        finally:
            server.send_signal(signal.SIGTERM)
            code = server.wait(timeout=60)
        if code != 0:
            sys.exit(f"authledger serve exited with {code} on SIGTERM")
        loads.append(os.getloadavg()[0])

    print("| part | B alone p50 ms (before, after) | B during A's flood p50 ms | ratio | aim "
          "| A's flood: accepted, refused |")
    print("|---|---:|---:|---:|---:|---:|")
    for part, r in results.items():
        print(f"| {part} | {r['alone_before']:.2f}, {r['alone_after']:.2f} | {r['during']:.2f} | {r['ratio']:.2f}× | "
              f"≤ {AIM}× | {r['flood_accepted']:,}, {r['flood_refused']:,} |")
    print("\n| create by tenant C | p50 ms | API CPU ms a request |\n|---|---:|---:|")
    print(f"| accepted (202) | {cost['accepted_p50']:.2f} | {cost['accepted_cpu']:.2f} |")
    print(f"| refused by its key's rate (429; {cost['refused']} of them, {cost['let_through']} let through) | "
          f"{cost['refused_p50']:.2f} | {cost['refused_cpu']:.2f} |")
    print(f"\nload average (1 min) at the start and after each part: {', '.join(f'{x:.2f}' for x in loads)}")


if __name__ == "__main__":
    main()
