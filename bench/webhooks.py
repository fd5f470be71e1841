"""Webhook delivery throughput against a receiver answering in 50 ms, beside email delivery in the same run (issue 39).

    PYTHONPATH=$PWD .venv/bin/python bench/webhooks.py [--quick] [--messages 2000] [--rounds 2] [--only emails]

Starts its own embedded PostgreSQL and two loopback HTTP stubs in processes
of their own (bench/provider_stubs.py), each answering every POST after
50 ms: one stands for the email provider, one for the application's webhook
receiver. Each run gets a fresh database from a template made from
schema.sql, and one in-process ``Worker`` at the default window (64 calls
in flight) drains it:

- ``emails``: N reset emails queued (not timed), no webhook endpoint: the
  email path as it is without webhooks.
- ``webhooks``: one endpoint and N ``WebhookQueued`` deliveries appended
  (not timed): the webhook path alone.
- ``both``: one endpoint hearing ``email.accepted`` and N reset emails: each
  accepted email queues a webhook in the same transaction, and the worker
  delivers both through the one outbox.

``--only emails`` runs the first kind alone and imports nothing of the
webhooks, so that the same script measures the email path on a checkout from
before them (``PYTHONPATH=<that checkout>``), alternating with this one.

A rate is N over the first ``LeaseClaimed`` to the last ``ProviderAccepted``
of its kind, read from the log. The window's bound, 64 ÷ 50 ms = 1,280 calls
a second, is the ceiling for either kind.
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from uuid import uuid4

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import Engine, create_engine, text  # after the path set-up

from bench.delivery import KEYS, SENDER, Server, _code_version, _print_table, _queue_resets
from bench.provider_stubs import Stub
from infra.db.embedded import start_embedded, stop_embedded
from infra.db.schema import init_schema
from infra.delivery.providers.http import HttpMailer
from infra.delivery.worker import Worker
from infra.services.unit_of_work import ServiceContext, append_and_fold

WINDOW = 64
LATENCY = 0.05
TEMPLATE = "webhooks_template"
RATE = text("""
    SELECT count(*) FILTER (WHERE event_type = 'ProviderAccepted') AS accepted,
           extract(epoch FROM max((payload->>'accepted_at')::timestamptz)
                              - min((payload->>'claimed_at')::timestamptz)) AS seconds
      FROM events
     WHERE starts_with(stream_id, :prefix) AND event_type IN ('LeaseClaimed', 'ProviderAccepted')
""")


def _queue_webhooks(ctx: ServiceContext, url: str, messages: int, chunk: int = 500) -> None:
    from domain.webhooks import WebhookEvent, deliveries, webhook_stream
    from infra.services.webhook_routes import ENDPOINTS
    from infra.services.webhooks import add_endpoint

    add_endpoint(ctx, "default", url)
    with ctx.engine.connect() as connection:
        endpoints = ENDPOINTS.of(connection)["default"]
    now = datetime.now(UTC)
    for start in range(0, messages, chunk):
        queued = [q for n in range(start, min(start + chunk, messages))
                  for q in deliveries(WebhookEvent("otp.verified", "default", {"tenant": "default",
                                                                                "user_id": f"user-{n:06d}"},
                                                   uuid4(), now), endpoints, now=now)]
        with ctx.engine.begin() as connection:
            append_and_fold(connection, [(webhook_stream(q.delivery_id), 0, [q]) for q in queued], {"actor": "bench"})


def _rate(engine: Engine, prefix: str) -> tuple[int, float]:
    with engine.connect() as connection:
        row = connection.execute(RATE, {"prefix": prefix}).one()
    return int(row.accepted), float(row.seconds or 0.0)


def _run(server: Server, kind: str, messages: int, mail_url: str, hook_url: str, n: int) -> dict[str, float]:
    database = f"run_{kind}_{n}"
    server.execute(f"CREATE DATABASE {database} TEMPLATE {TEMPLATE}")
    engine = create_engine(server.url(database, "postgresql+psycopg"), pool_size=8)
    ctx = ServiceContext(engine=engine, keys=KEYS)
    if kind in ("emails", "both"):
        if kind == "both":
            from infra.services.webhooks import add_endpoint
            add_endpoint(ctx, "default", hook_url, ["email.accepted"])
        _queue_resets(engine, messages)
    else:
        _queue_webhooks(ctx, hook_url, messages)
    with HttpMailer(mail_url, window=WINDOW) as mailer:
        started = time.monotonic()
        Worker(ctx, mailer, sender=SENDER, inflight=WINDOW).drain()
        wall = time.monotonic() - started
    emails, email_seconds = _rate(engine, "email:")
    hooks, hook_seconds = _rate(engine, "webhook:")
    engine.dispose()
    return {"emails": emails, "emails/s": emails / email_seconds if email_seconds else 0.0,
            "webhooks": hooks, "webhooks/s": hooks / hook_seconds if hook_seconds else 0.0, "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000, help="emails or webhooks per run (default 2000)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each kind, alternating (default 2)")
    parser.add_argument("--quick", action="store_true", help="200 messages, 1 round: a smoke test")
    parser.add_argument("--only", choices=["emails"], help="only the email runs (on a checkout from before webhooks)")
    args = parser.parse_args()
    messages, rounds = (200, 1) if args.quick else (args.messages, args.rounds)
    os.environ.setdefault("AUTHLEDGER_MASTER_KEY", f"bench:{base64.urlsafe_b64encode(os.urandom(32)).decode()}")
    data_dir = Path(tempfile.mkdtemp(prefix="authledger-bench-webhooks-"))
    server = Server(start_embedded(data_dir))
    mail, hooks = Stub("http", LATENCY), Stub("http", LATENCY)
    try:
        server.execute(f"CREATE DATABASE {TEMPLATE}")
        admin = create_engine(server.url(TEMPLATE, "postgresql+psycopg"))
        init_schema(admin)
        admin.dispose()
        print(f"code {_code_version()}; {messages} per run, {rounds} round(s), both stubs answering in "
              f"{LATENCY * 1000:.0f} ms, window {WINDOW} (bound {WINDOW / LATENCY:,.0f} calls/s); "
              f"load {os.getloadavg()[0]:.2f}")
        rows = []
        for n in range(rounds):
            for kind in ("emails",) if args.only else ("emails", "webhooks", "both"):
                result = _run(server, kind, messages, f"http://127.0.0.1:{mail.port}/emails",
                              f"http://127.0.0.1:{hooks.port}/hooks", n)
                rows.append([kind, str(n + 1), f"{result['emails']:.0f}", f"{result['emails/s']:,.0f}",
                             f"{result['webhooks']:.0f}", f"{result['webhooks/s']:,.0f}", f"{result['wall']:.2f}"])
        _print_table(["run", "round", "emails", "emails/s", "webhooks", "webhooks/s", "wall s"], rows)
        print(f"stub CPU share: emails {mail.stop()['cpu_share']:.2f}, webhooks {hooks.stop()['cpu_share']:.2f}")
    finally:
        stop_embedded(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
