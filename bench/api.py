"""HTTP API throughput and latency beside /healthz on the same server, in the same run (issue 5).

    .venv/bin/python bench/api.py [--requests 2000] [--clients 16] [--rounds 3] [--quick]

Starts its own embedded PostgreSQL in a temporary directory with the
server's default durability (the output lists the settings), initialises a
database, registers an API client, then starts the real thing: `authledger
serve --inflight 0` (one uvicorn process; delivery off, so that workers do
not compete for the two cores with the API being measured) with JSON logs,
one line per request, written to a file.

One asyncio client process keeps ``--clients`` requests in flight over as
many keep-alive HTTP/1.1 connections (httpx). Each round measures, in turn:

- ``GET /healthz``: routing, middleware and the event loop, no database:
  the framework's ceiling on this machine;
- ``POST /v1/otp/challenges``: a new user and a new Idempotency-Key each, so
  every request authenticates its key, takes the key's advisory lock, loads
  an empty stream, appends the challenge and its email and folds three
  inline projections, in one transaction;
- ``POST /v1/otp/challenges/{id}/verify`` with the right code, once per
  challenge just created: authenticate, find the user, load the stream,
  append ``OtpChallengeVerified``.

The rounds alternate the order of the three. Figures are medians over
rounds; each ratio to /healthz is the median of the per-round ratios.
Latency is measured by the client from send to full response, so it
includes the client's own share of the CPU. The run fails if any answer is
not the expected status.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import base64
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from uuid import uuid4

import httpx
import psycopg
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from domain.otp import fold_otp, otp_code_for
from domain.tokens import TokenKeys
from infra.eventlog.postgres import PostgresEventStore
from infra.db.embedded import start_embedded
from infra.services.clients import create_client
from infra.services.unit_of_work import ServiceContext
from infra.db.schema import init_schema

ROOT = Path(__file__).resolve().parent.parent
AUTHLEDGER = str(Path(sys.executable).parent / "authledger")
DATABASE = "bench_api"
KEY = b"bench-api-key-0123456789abcdef-01"
TOKEN_KEYS = "bench:" + base64.urlsafe_b64encode(KEY).decode().rstrip("=")
SETTINGS = ["fsync", "synchronous_commit", "shared_buffers", "max_connections"]
Call = Callable[[httpx.AsyncClient, int], Awaitable[httpx.Response]]


def _url(uri: str, database: str, driver: str = "postgresql") -> str:
    return make_url(uri).set(drivername=driver, database=database).render_as_string(hide_password=False)


def _prepare(uri: str) -> tuple[str, dict[str, str]]:
    """The bench database, initialised, and an API key for it; and the server's settings."""
    with psycopg.connect(_url(uri, "postgres"), autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {DATABASE}")
        settings = {"server_version": connection.execute("SHOW server_version").fetchone()[0]}
        settings |= {name: connection.execute(f"SHOW {name}").fetchone()[0] for name in SETTINGS}
    admin = create_engine(_url(uri, DATABASE, "postgresql+psycopg"))
    init_schema(admin)
    admin.dispose()
    app_engine = create_engine(_url(uri, DATABASE, "postgresql+psycopg"),
                               connect_args={"options": "-c role=authledger_app"})
    api_key = create_client(ServiceContext(engine=app_engine, keys=TokenKeys("bench", {"bench": KEY})), "bench").api_key
    app_engine.dispose()
    return api_key, settings


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


MASTER_KEY = "bench:" + base64.urlsafe_b64encode(b"b" * 32).decode().rstrip("=")  # a throwaway one


def _start_server(database_url: str, data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = {**os.environ, "DATABASE_URL": database_url, "AUTHLEDGER_TOKEN_KEYS": TOKEN_KEYS,
           "AUTHLEDGER_DATA_DIR": str(data_dir), "AUTHLEDGER_MAILDIR": str(data_dir / "maildir"),
           "AUTHLEDGER_LOG_FORMAT": "json", "AUTHLEDGER_OTP_HOURLY_LIMIT": "1000",
           "AUTHLEDGER_MASTER_KEY": os.environ.get("AUTHLEDGER_MASTER_KEY", MASTER_KEY)}
    with (data_dir / "serve.log").open("wb") as log:
        process = subprocess.Popen([AUTHLEDGER, "serve", "--port", str(port), "--inflight", "0"],
                                   env=env, stdout=subprocess.DEVNULL, stderr=log)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"authledger serve exited with {process.returncode}; see {data_dir / 'serve.log'}")
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                return process, base
        except httpx.TransportError:
            time.sleep(0.1)
    sys.exit("authledger serve did not become ready within 30 s")


async def _measure(client: httpx.AsyncClient, call: Call, count: int, clients: int,
                   expected: int) -> tuple[float, list[float]]:
    """Requests/s over ``count`` calls with ``clients`` in flight, and each call's latency in seconds."""
    latencies: list[float] = []
    next_index = 0

    async def one_client() -> None:
        nonlocal next_index
        while next_index < count:
            index, next_index = next_index, next_index + 1
            started = time.perf_counter()
            response = await call(client, index)
            latencies.append(time.perf_counter() - started)
            if response.status_code != expected:
                raise SystemExit(f"expected {expected}, got {response.status_code}: {response.text}")

    started = time.perf_counter()
    await asyncio.gather(*(one_client() for _ in range(clients)))
    return count / (time.perf_counter() - started), latencies


ISSUED_STREAMS = text("""
    SELECT DISTINCT stream_id FROM events
     WHERE event_type = 'OtpChallengeIssued' AND payload->>'challenge_id' = ANY(CAST(:ids AS text[]))
""")


def _codes(database_url: str, challenge_ids: list[str]) -> list[str]:
    """The codes the challenges' emails carry, derived from the key and each challenge's nonce, opened from the log.

    Read before the verify calls are timed: key and id alone no longer yield a code.
    """
    engine = create_engine(_url(database_url, DATABASE, "postgresql+psycopg"))
    keys, found = TokenKeys("bench", {"bench": KEY}), {}
    with engine.connect() as connection:
        streams = connection.execute(ISSUED_STREAMS, {"ids": [i for i in challenge_ids if i]}).scalars().all()
        for history in PostgresEventStore(connection).load_many(streams).values():
            for challenge in fold_otp(r.event for r in history).challenges.values():
                found[str(challenge.challenge_id)] = otp_code_for(challenge, keys)
    engine.dispose()
    return [found.get(challenge_id, "000000") for challenge_id in challenge_ids]


async def _round(base: str, api_key: str, count: int, clients: int, order: list[str],
                 codes_of: Callable[[list[str]], list[str]]) -> dict[str, tuple]:
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    headers = {"Authorization": f"Bearer {api_key}"}
    created: list[str] = [""] * count
    codes: list[str] = []
    run_id = uuid4().hex[:8]

    async def healthz(client: httpx.AsyncClient, index: int) -> httpx.Response:
        return await client.get("/healthz")

    async def challenge(client: httpx.AsyncClient, index: int) -> httpx.Response:
        body = {"user_id": f"bench-{run_id}-{index}", "email": f"user{index}@example.com"}
        response = await client.post("/v1/otp/challenges", json=body, headers={"Idempotency-Key": uuid4().hex})
        if response.status_code == 202:
            created[index] = response.json()["challenge_id"]
        return response

    async def verify(client: httpx.AsyncClient, index: int) -> httpx.Response:
        challenge_id, code = created[index], codes[index]
        return await client.post(f"/v1/otp/challenges/{challenge_id}/verify",
                                 json={"code": code, "user_id": f"bench-{run_id}-{index}"})

    calls: dict[str, tuple[Call, int]] = {"healthz": (healthz, 200), "otp": (challenge, 202), "verify": (verify, 200)}
    results = {}
    async with httpx.AsyncClient(base_url=base, headers=headers, limits=limits, timeout=30) as client:
        await _measure(client, healthz, clients * 4, clients, 200)  # open every connection first
        for name in order:
            if name == "verify":
                codes[:] = codes_of(created)
            call, expected = calls[name]
            results[name] = await _measure(client, call, count, clients, expected)
    return results


def _ms(latencies: list[float], quantile: int) -> float:
    return statistics.quantiles(latencies, n=100, method="inclusive")[quantile - 1] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per endpoint per round (default 2000)")
    parser.add_argument("--clients", type=int, default=16, help="requests in flight (default 16)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, alternating the order (default 3)")
    parser.add_argument("--quick", action="store_true", help="200 requests, 1 round: a smoke test for CI")
    args = parser.parse_args()
    count, rounds = (200, 1) if args.quick else (args.requests, args.rounds)

    data_dir = Path(tempfile.mkdtemp(prefix="authledger-bench-api-"))
    atexit.register(shutil.rmtree, data_dir, ignore_errors=True)  # after the embedded server's exit hook
    uri = start_embedded(data_dir / "pg")
    api_key, settings = _prepare(uri)
    # The bench reads each challenge's sealed nonce as the server does: under the same master key.
    os.environ.setdefault("AUTHLEDGER_MASTER_KEY", MASTER_KEY)
    server, base = _start_server(_url(uri, DATABASE), data_dir)
    try:
        print(f"PostgreSQL {settings.pop('server_version')} (embedded, unix socket, data in {data_dir})")
        print("durability: " + ", ".join(f"{name}={value}" for name, value in settings.items()))
        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} at start, "
              f"Python {platform.python_version()}, httpx {httpx.__version__}")
        print(f"server: authledger serve --inflight 0 (one uvicorn process) at {base}")
        print(f"{count} requests per endpoint per round, {args.clients} in flight, {rounds} rounds\n")
        samples: dict[str, list[tuple[float, list[float]]]] = {"healthz": [], "otp": [], "verify": []}
        for round_ in range(rounds):
            order = ["healthz", "otp", "verify"] if round_ % 2 == 0 else ["otp", "verify", "healthz"]
            codes_of = lambda ids: _codes(uri, ids)  # noqa: E731
            for name, result in asyncio.run(_round(base, api_key, count, args.clients, order, codes_of)).items():
                samples[name].append(result)
                print(f"  round {round_ + 1}: {name:<8} {result[0]:>8,.0f} req/s", flush=True)
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=30)
    if code != 0:
        sys.exit(f"authledger serve exited with {code} on SIGTERM")

    labels = {"healthz": "GET /healthz", "otp": "POST /v1/otp/challenges",
              "verify": "POST /v1/otp/challenges/{id}/verify"}
    print("\n| endpoint | req/s | p50 ms | p99 ms | req/s ÷ /healthz |\n|---|---|---|---|---|")
    for name, runs in samples.items():
        rate = statistics.median(r for r, _ in runs)
        ratio = statistics.median(r / h for (r, _), (h, _) in zip(runs, samples["healthz"], strict=True))
        p50 = statistics.median(_ms(lat, 50) for _, lat in runs)
        p99 = statistics.median(_ms(lat, 99) for _, lat in runs)
        print(f"| {labels[name]} | {rate:,.0f} | {p50:.1f} | {p99:.1f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
