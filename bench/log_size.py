"""Cost growth in log size: the request paths and the worker's claim on a 10M-event log beside a 10k one (issue 13).

    .venv/bin/python bench/log_size.py [--events 10000000] [--small 10000] [--calls 300] [--quick]
                                       [--data-dir DIR] [--no-catch-up] [--plans FILE]
                                       [--shared-buffers 6GB --prewarm] [--random-ids] [--statements]

One embedded PostgreSQL (server defaults: fsync and synchronous_commit on),
two databases in it built alike: ``small`` (``--small`` events) and
``large`` (``--events``). Each log is made by bench/rebuild.py's generator
(reset requests and OTP challenges with idempotency keys and address
hashes, their emails, workers trailing them, recipients sealed per user)
appended as the service appends them, then brought up to date as ``serve``
keeps it: the inline projections the generated events feed rebuilt
(``email_outbox``, ``reset_tokens``, ``otp_challenges``, ``receipts``,
``address_index``, ``stream_snapshots``), the catch-up projections (``audit_index``,
``delivery_stats``) caught up, VACUUM ANALYZE. Every step is timed.

Measured through the service functions the HTTP handlers call (no HTTP),
interleaved small/large call by call (the order flips every round), each
round with a fresh user in each database: reset create, verify and consume
of the request just made; OTP create and verify of the challenge just made;
the worker's claim of a batch of due email (``Worker.claim``), given back at
once (``LeaseReleased``, recorded as the worker records outcomes, through a
pool of their own) so that a claim takes nothing away. Both queues are
drained first (the generated log's last emails, and any an earlier run
queued), then grow alike: the round's creates and consume queue three
emails, so after ``--warm`` rounds every claim is a whole batch of 32 out
of the same number due. Printed: p50/p95 per operation and database, and
large ÷ small; the aim is within 15% (a ratio ≤ 1.15).

Then the plans: every statement those paths sent on the large database
(captured with SQLAlchemy's ``before_cursor_execute``, as bench/console.py
does) is run again under EXPLAIN (ANALYZE, BUFFERS, WAL), writes in a transaction
rolled back; a write that cannot be replayed (its row is already there) is
shown with plain EXPLAIN. Sequential scans are flagged; ``--plans`` writes
every plan to a file. Those are only the statements SQLAlchemy sends: the
hot path's pipelined ones go through psycopg (infra/db/pipeline.py), and
``--statements`` loads pg_stat_statements to compare every statement's time
per call, blocks read and full-page images on the two logs. Last, the pages
of ``events`` whose free space map entry has room for the claim's and the
release's small events (``LeaseClaimed``, ``LeaseReleased``), before and
after the rounds: an insert takes any page the map offers, and on a large
log those are pages long out of memory (bench/history/issue-13-2026-12-02.md,
"Where the worker's small events land").

``--data-dir`` keeps the server and its databases in DIR, and a later run
with the same DIR measures the large log again without rebuilding it (after
``db init``'s schema upgrade, so an index added since is built on the big
log); the small one is rebuilt, as the bench's own rounds would grow it.
``--quick`` is a smoke size: 200,000 events, 40 calls. Two experiments
locate the claim's growth (bench/history/issue-13-2026-12-01.md):
``--shared-buffers`` with ``--prewarm`` holds every index in memory,
``--random-ids`` makes new ids and event ids random UUIDs, as they were
before infra/eventlog/ids.py.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from uuid import uuid4

import psycopg
from sqlalchemy import Engine, make_url, text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import rebuild as generated  # noqa: E402 - after the path set-up

os.environ.setdefault(generated.MASTER_KEY_VARIABLE, generated.BENCH_MASTER_KEY)

from bench.bench_server import BenchServer, start_bench_server  # noqa: E402
from bench.console import BenchMailer, Captured, pct  # noqa: E402
from domain.otp import RequestOtp, otp_code_for  # noqa: E402
from domain.otp_events import otp_stream  # noqa: E402
from domain.otp_state import fold_otp  # noqa: E402
from domain.reset import RequestReset, reset_token_for  # noqa: E402
from domain.reset_events import reset_stream  # noqa: E402
from domain.reset_state import fold_reset  # noqa: E402
from infra.db.engine import Database  # noqa: E402
from infra.db.schema import init_schema  # noqa: E402
from infra.delivery.send import record, released  # noqa: E402
from infra.eventlog.subject_keys import SAMPLE_UNDER_MASTER  # noqa: E402
from infra.delivery.worker import Worker  # noqa: E402
from infra.projector.catchup import catch_up  # noqa: E402
from infra.projector.rebuild import rebuild  # noqa: E402
from infra.projector.registry import projection_named  # noqa: E402
from infra.services.otp import request_otp, verify_code  # noqa: E402
from infra.services.reset import consume_token, request_reset, verify_token  # noqa: E402
from infra.eventlog.ids import time_ordered_id  # noqa: E402
from infra.services.unit_of_work import ServiceContext, load_state  # noqa: E402

KEYS = generated.KEYS  # the keys the generated requests were made and hashed under
REBUILT = ("email_outbox", "reset_tokens", "otp_challenges", "receipts", "address_index", "stream_snapshots")
CAUGHT_UP = ("audit_index", "delivery_stats")
CLAIM_BATCH = 32
AIM = 1.15
OWNER = "bench-log-size"
SENDER = "authledger <no-reply@bench.test>"
OPERATIONS = ("reset create", "reset verify", "reset consume", "otp create", "otp verify", "worker claim",
              "worker release")
SEQ_SCAN = re.compile(r"Seq Scan on (\w+)")


class NoMailer:
    """The worker's mailer; the bench only claims and gives back, it never sends."""

    name, idempotent, timeout_seconds = "bench", True, 1.0


def step(what: str) -> Callable[[], None]:
    """Print ``what``, and when the returned function is called, how long it took."""
    print(f"  {what} ...", end="", flush=True)
    started = time.perf_counter()
    return lambda: print(f" {time.perf_counter() - started:.1f} s", flush=True)


def build(server: BenchServer, name: str, events: int, caught_up: tuple[str, ...]) -> str:
    """A database of ``events`` generated events, its projections up to date; its SQLAlchemy URL."""
    print(f"{name}: {events:,} events", flush=True)
    url = server.create_database(f"authledger_bench_{name}")
    conninfo = url.replace("postgresql+psycopg://", "postgresql://", 1)
    done = step(f"appending, {generated.ROWS_PER_TRANSACTION} events a transaction")
    generated.generate(conninfo, generated.Log(), events)
    done()
    admin = Database(url).admin_engine()
    for projection in REBUILT:
        done = step(f"rebuilding {projection}")
        rebuild(admin, projection_named(projection), batch_size=10_000)
        done()
    if caught_up:
        done = step(f"catching up {', '.join(caught_up)}")
        catch_up(admin, [projection_named(p) for p in caught_up], batch_size=10_000)
        done()
    done = step("VACUUM ANALYZE")
    vacuum_analyze(admin)
    done()
    with admin.connect() as connection:
        connection.execute(text("CREATE TABLE IF NOT EXISTS bench_built (events bigint)"))
        connection.execute(text("INSERT INTO bench_built VALUES (:n)"), {"n": events})
        connection.commit()
    admin.dispose()
    return url


def vacuum_analyze(admin: Engine) -> None:
    with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text("VACUUM ANALYZE"))


def built_url(server: BenchServer, name: str) -> str | None:
    """The URL of a database a previous run built and kept, upgraded to today's schema; None if there is none."""
    url = server.database_url(f"authledger_bench_{name}")
    try:
        admin = Database(url).admin_engine()
        with admin.connect() as connection:
            built = connection.execute(text("SELECT events FROM bench_built")).scalar()
    except Exception:  # noqa: BLE001 - no such database, or a build that never finished
        return None
    done = step(f"{name}: kept from an earlier run ({built:,} events); db init's upgrade, VACUUM ANALYZE")
    init_schema(admin)
    vacuum_analyze(admin)
    admin.dispose()
    done()
    return url


@contextmanager
def services(url: str, random_ids: bool) -> Iterator[tuple[ServiceContext, Worker, Captured]]:
    engine = Database(url).engine(pool_size=4)
    outcomes = Database(url).engine(pool_size=2)  # the worker's pool for outcomes, as the app makes it
    ctx = ServiceContext(engine=engine, keys=KEYS, new_id=uuid4 if random_ids else time_ordered_id)
    try:
        yield ctx, Worker(ctx, NoMailer(), sender=SENDER, owner=OWNER, outcomes=outcomes), Captured(engine, outcomes)
    finally:
        engine.dispose()
        outcomes.dispose()


def use_random_ids() -> None:
    """The comparison of ``--random-ids``: every new id and event id a random UUID, in this process only.

    Random ids put each new event in a random leaf of the log's unique indexes
    (events_event_id_key, and for a new stream events_stream_version_key),
    which a 10M-event log no longer holds in memory: what authledger did
    before its ids were time-ordered.
    """
    from infra.eventlog import email_leases, postgres
    from infra.services import unit_of_work

    email_leases.time_ordered_id = uuid4  # type: ignore[attr-defined]
    postgres.time_ordered_id = uuid4  # type: ignore[attr-defined]
    unit_of_work.time_ordered_id = uuid4  # type: ignore[attr-defined]


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


def one_round(ctx: ServiceContext, worker: Worker, user: str) -> dict[str, float]:
    """Seconds each operation took for one fresh user, one claim and release of due mail, and how many it claimed."""
    times = {}
    # With an idempotency key, as the HTTP API's clients send one (README): the receipts lookup is included.
    reset = RequestReset(user, f"{user}@example.com", idempotency_key=uuid4().hex, client="bench")
    times["reset create"], _ = timed(lambda: request_reset(ctx, reset))
    request = next(iter(load_state(ctx, reset_stream(user), fold_reset).requests.values()))
    token = reset_token_for(request, KEYS)
    times["reset verify"], _ = timed(lambda: verify_token(ctx, token))
    times["reset consume"], _ = timed(lambda: consume_token(ctx, token))
    otp = RequestOtp(user, f"{user}@example.com", idempotency_key=uuid4().hex, client="bench")
    times["otp create"], _ = timed(lambda: request_otp(ctx, otp))
    challenge = next(iter(load_state(ctx, otp_stream(user), fold_otp).challenges.values()))
    code = otp_code_for(challenge, KEYS)
    times["otp verify"], _ = timed(lambda: verify_code(ctx, challenge.challenge_id, code, user_id=user))
    times["worker claim"], claims = timed(lambda: worker.claim(OWNER, CLAIM_BATCH))
    given_back = [released(ctx, claim, OWNER, attempt_returned=True) for claim in claims]
    times["worker release"], states = timed(lambda: record(worker.outcomes, given_back, OWNER))
    assert set(states.values()) <= {"pending"}, states
    times["claimed"] = len(claims)
    return times


def measure(urls: dict[str, str], calls: int, warm: int, random_ids: bool) -> tuple[dict[str, dict[str, list[float]]],
                                                                      dict[str, list[tuple[str, Any]]]]:
    """Per database and operation, the seconds of ``calls`` rounds; and per database the statements of one round."""
    run = uuid4().hex[:8]
    samples: dict[str, dict[str, list[float]]] = {name: {op: [] for op in OPERATIONS} for name in urls}
    with services(urls["small"], random_ids) as small, services(urls["large"], random_ids) as large:
        both = {"small": small, "large": large}
        for ctx, _, _ in both.values():
            # Both queues start empty and grow alike (three emails a round), whatever earlier runs left.
            Worker(ctx, BenchMailer(), sender=SENDER, owner=OWNER).drain()
        for n in range(warm + calls):
            order = ("small", "large") if n % 2 == 0 else ("large", "small")
            for name in order:
                ctx, worker, _ = both[name]
                times = one_round(ctx, worker, f"ls-{run}-{n}")
                if n >= warm:  # by then 3 × warm emails are queued: every claim is a whole batch
                    assert times.pop("claimed") == CLAIM_BATCH, "fewer due emails than a batch"
                    for op, seconds in times.items():
                        samples[name][op].append(seconds)
        statements = {}
        for name, (ctx, worker, captured) in both.items():
            captured.statements, captured.on = [], True
            one_round(ctx, worker, f"ls-{run}-plans")
            captured.on = False
            statements[name] = captured.statements
    return samples, statements


def explain(conninfo: str, statements: list[tuple[str, Any]]) -> list[tuple[str, str, str | None]]:
    """(statement, plan, plan without sequential scans) for each distinct statement; writes rolled back.

    A statement planned with a sequential scan is planned again with
    ``enable_seqscan`` off: on a small table the planner rightly prefers the
    scan, and the second plan shows whether an index would serve it once the
    table is large. A write the real call already made (its row is there) is
    shown with plain EXPLAIN.
    """
    plans, seen = [], set()
    with psycopg.connect(conninfo) as connection:
        wanted = [(s, p) for s, p in statements if re.match(r"\s*(SELECT|WITH|INSERT|UPDATE|DELETE)", s, re.I)]
        # The one probe whose cost depends on the data, not only on the size: a new user's check of the
        # current master key after a rotation, when no key is under it yet.
        rotated = SAMPLE_UNDER_MASTER.text.replace(":master_key_id", "%(master_key_id)s")
        labelled = [(s, p, s) for s, p in wanted] + [
            (rotated, {"master_key_id": "rotated"}, f"{rotated} -- after a rotation: no key under it yet")]
        for statement, parameters, label in labelled:
            if label in seen:
                continue
            seen.add(label)
            plan = _plan(connection, statement, parameters)
            indexed = _plan(connection, statement, parameters, seqscan=False) if SEQ_SCAN.search(plan) else None
            plans.append((label, plan, indexed))
    return plans


def _plan(connection: psycopg.Connection, statement: str, parameters: Any, *, seqscan: bool = True) -> str:
    try:
        connection.execute("SET role authledger_app")
        connection.execute(f"SET enable_seqscan = {'on' if seqscan else 'off'}")
        rows = connection.execute(f"EXPLAIN (ANALYZE, BUFFERS, WAL) {statement}", parameters).fetchall()
        plan = "\n".join(row[0] for row in rows)
    except psycopg.Error as error:  # a write whose row the real call already wrote
        connection.rollback()
        connection.execute("SET role authledger_app")
        connection.execute(f"SET enable_seqscan = {'on' if seqscan else 'off'}")
        rows = connection.execute(f"EXPLAIN {statement}", parameters).fetchall()
        plan = f"(not replayable: {type(error).__name__}; plan only)\n" + "\n".join(row[0] for row in rows)
    connection.rollback()
    return plan


PREWARM = text("""
    SELECT coalesce(sum(pg_prewarm(c.oid)), 0) * current_setting('block_size')::bigint
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'public' AND (c.relkind = 'i' OR c.relname = 'email_outbox')
""")


def prewarm(url: str) -> int:
    """Read every index and the outbox table into shared buffers; the bytes read."""
    admin = Database(url).admin_engine()
    with admin.begin() as connection:
        connection.execute(text("CREATE EXTENSION IF NOT EXISTS pg_prewarm"))
        loaded = connection.execute(PREWARM).scalar_one()
    admin.dispose()
    return int(loaded)


def table_sizes(conninfo: str) -> list[tuple[str, int, str]]:
    with psycopg.connect(conninfo) as connection:
        return connection.execute("""
            SELECT c.relname, c.reltuples::bigint, pg_size_pretty(pg_total_relation_size(c.oid))
              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i')
             ORDER BY pg_total_relation_size(c.oid) DESC LIMIT 16""").fetchall()


# What the measured claim and release append, one per email of the batch: small events, which fit in the
# room a page of the log was left with when the next event did not (bench/history/issue-13-2026-12-02.md,
# "Where the worker's small events land").
SMALL_EVENTS = ("LeaseClaimed", "LeaseReleased")
FREE_SPACE = "SELECT avail, count(*) FROM pg_freespace('events') GROUP BY avail"
NEWEST_ROW_BYTES = """
    SELECT pg_column_size(e.*) FROM (SELECT * FROM events WHERE event_type = %s ORDER BY global_position DESC
                                      LIMIT 1) e
"""


def free_space(conninfo: str) -> Counter[int]:
    """How many pages of ``events`` the free space map records with each amount of room (its 32-byte steps)."""
    with psycopg.connect(conninfo, autocommit=True) as connection:
        connection.execute("CREATE EXTENSION IF NOT EXISTS pg_freespacemap")
        return Counter(dict(connection.execute(FREE_SPACE).fetchall()))


def report_room(conninfos: dict[str, str], before: dict[str, Counter[int]], after: dict[str, Counter[int]]) -> None:
    """For each small event: the pages the free space map would offer it, before and after the rounds.

    An insert asks the map for a page with room for its row (8-byte aligned)
    rounded up to the map's 32-byte steps, and takes any it is offered.
    """
    print("\npages of `events` with room for one of the worker's small events (the free space map's count), "
          "before / after the rounds\n")
    print("| log | event | row bytes | room asked | pages before | pages after |")
    print("|---|---|---:|---:|---:|---:|")
    for name, conninfo in conninfos.items():
        with psycopg.connect(conninfo) as connection:
            for event_type in SMALL_EVENTS:
                size = connection.execute(NEWEST_ROW_BYTES, (event_type,)).fetchone()[0]
                asked = -(-((size + 7) // 8 * 8) // 32) * 32
                print(f"| {name} | {event_type} | {size} | {asked} | {_offering(before[name], asked):,} | "
                      f"{_offering(after[name], asked):,} |")


def _offering(pages_by_room: Counter[int], asked: int) -> int:
    return sum(pages for room, pages in pages_by_room.items() if room >= asked)


def report(samples: dict[str, dict[str, list[float]]], sizes: dict[str, int], calls: int) -> None:
    print(f"\n{calls} rounds, interleaved; log sizes: small {sizes['small']:,}, large {sizes['large']:,} events; "
          f"load average {', '.join(f'{v:.1f}' for v in os.getloadavg())} at the end\n")
    print("| operation | small p50 (ms) | small p95 (ms) | large p50 (ms) | large p95 (ms) | "
          "large ÷ small p50 | p95 | aim |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for op in OPERATIONS:
        s, big = samples["small"][op], samples["large"][op]
        r50, r95 = pct(big, .5) / pct(s, .5), pct(big, .95) / pct(s, .95)
        verdict = "met" if r50 <= AIM and r95 <= AIM else "MISSED"
        print(f"| {op} | {pct(s, .5):.2f} | {pct(s, .95):.2f} | {pct(big, .5):.2f} | {pct(big, .95):.2f} | "
              f"{r50:.2f} | {r95:.2f} | ≤ {AIM:.2f}: {verdict} |")


def report_plans(plans: list[tuple[str, str, str | None]], path: Path | None) -> None:
    print(f"\nplans on the large log: {len(plans)} distinct statements; sequential scans:")
    for statement, plan, indexed in plans:
        scans = sorted(set(SEQ_SCAN.findall(plan)))
        if not scans:
            continue
        took = re.search(r"Execution Time: ([0-9.]+) ms", plan)
        instead = re.findall(r"(?:Index|Index Only|Bitmap Index) Scan (?:Backward )?using (\w+)", indexed or "")
        print(f"  on {', '.join(scans)} ({took.group(1) if took else '?'} ms; "
              f"{'an index serves it: ' + ', '.join(sorted(set(instead))) if instead else 'NO INDEX serves it'}): "
              f"{' '.join(statement.split())[:90]}")
    if path is not None:
        path.write_text("".join(
            f"-- {' '.join(s.split())}\n{p}\n" + (f"-- with enable_seqscan off:\n{i}\n" if i else "") + "\n"
            for s, p, i in plans))
        print(f"  every plan written to {path}")


def compare_plans(plans: dict[str, list[tuple[str, str, str | None]]]) -> None:
    """The statements whose execution (or WAL) differs most between the logs, one round's worth of each."""
    def figures(plan: str) -> tuple[float, int, int]:
        took = re.search(r"Execution Time: ([0-9.]+) ms", plan)
        return (float(took.group(1)) if took else 0.0,
                sum(int(n) for n in re.findall(r"^\s*Buffers: shared.*?read=(\d+)", plan, re.M)[:1]),
                sum(int(n) for n in re.findall(r"^\s*WAL: .*?fpi=(\d+)", plan, re.M)[:1]))
    small = {statement: figures(plan) for statement, plan, _ in plans["small"]}
    rows = [(statement, small[statement], figures(plan)) for statement, plan, _ in plans["large"] if statement in small]
    rows.sort(key=lambda row: row[2][0] - row[1][0], reverse=True)
    print("\nstatements, EXPLAIN ANALYZE on each log (writes rolled back): execution ms, buffers read, WAL "
          "full-page images; the five that grew most\n")
    print("| statement | small ms | large ms | small read | large read | small FPI | large FPI |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for statement, (s_ms, s_read, s_fpi), (l_ms, l_read, l_fpi) in rows[:5]:
        print(f"| `{' '.join(statement.split())[:60]}…` | {s_ms:.2f} | {l_ms:.2f} | {s_read} | {l_read} | "
              f"{s_fpi} | {l_fpi} |")


# Each statement's time per call in each database, as pg_stat_statements counted it during the rounds.
PER_DATABASE = """
    SELECT d.datname, regexp_replace(s.query, '\\s+', ' ', 'g') AS query, s.calls,
           s.total_exec_time / s.calls AS ms, s.shared_blks_read::float / s.calls AS read,
           s.wal_fpi::float / s.calls AS fpi
      FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
     WHERE d.datname = ANY(%s) AND s.calls >= 20
"""


def report_statements(uri: str, databases: dict[str, str], top: int = 10) -> None:
    """The statements whose time per call grew most from the small log to the large, with the blocks each
    read from outside shared buffers and the full-page images each wrote to the WAL."""
    with psycopg.connect(uri) as connection:
        rows = connection.execute(PER_DATABASE, (list(databases.values()),)).fetchall()
    name_of = {database: name for name, database in databases.items()}
    by_query: dict[str, dict[str, tuple[float, float, float]]] = {}
    for database, query, _calls, ms, read, fpi in rows:
        by_query.setdefault(query, {})[name_of[database]] = (ms, read, fpi)
    grown = sorted(((d["large"][0] - d["small"][0], query, d) for query, d in by_query.items() if len(d) == 2),
                   reverse=True)
    print(f"\nthe {top} statements whose time per call grew most (pg_stat_statements, the measured rounds)\n")
    print("| statement | small µs | large µs | blocks read, small / large | full-page images, small / large |")
    print("|---|---:|---:|---|---|")
    for _, query, d in grown[:top]:
        (small_ms, small_read, small_fpi), (large_ms, large_read, large_fpi) = d["small"], d["large"]
        print(f"| `{query[:60]}…` | {small_ms * 1000:,.0f} | {large_ms * 1000:,.0f} | "
              f"{small_read:.2f} / {large_read:.2f} | {small_fpi:.2f} / {large_fpi:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=10_000_000, help="the large log (default 10,000,000)")
    parser.add_argument("--small", type=int, default=10_000, help="the small log (default 10,000)")
    parser.add_argument("--calls", type=int, default=300, help="measured rounds (default 300)")
    parser.add_argument("--warm", type=int, default=20,
                        help="rounds first, not counted (default 20; at least 11, to queue a claim's batch)")
    parser.add_argument("--quick", action="store_true", help="a smoke size: 200,000 events, 40 rounds")
    parser.add_argument("--data-dir", type=Path, help="keep the server and its databases here, reuse them")
    parser.add_argument("--no-catch-up", action="store_true",
                        help="leave audit_index and delivery_stats empty (no measured path reads or writes them; "
                             "catching up is the longest step of a 10M build)")
    parser.add_argument("--shared-buffers", help="the server's shared_buffers, e.g. 6GB (default: PostgreSQL's)")
    parser.add_argument("--prewarm", action="store_true",
                        help="load every index and email_outbox into shared buffers first, as a server "
                             "that has run a while holds its hot pages")
    parser.add_argument("--random-ids", action="store_true",
                        help="new ids (requests, messages) and event ids random UUIDs instead of UUIDv7, "
                             "as before infra/eventlog/ids.py: the comparison for the claim's cost")
    parser.add_argument("--plans", type=Path, help="write every plan of the large log to this file")
    parser.add_argument("--statements", action="store_true",
                        help="load pg_stat_statements and print each statement's time per call on both logs "
                             "(the plan section sees only what SQLAlchemy sends, not the pipelined hot path)")
    args = parser.parse_args()
    logging.getLogger("authledger").setLevel(logging.ERROR)  # one log line per call would be the bench's cost
    if args.quick:
        args.events, args.calls, args.warm = 200_000, 40, 11

    server = start_bench_server("authledger-bench-log-size-", data_dir=args.data_dir,
                                shared_buffers=args.shared_buffers, statements=args.statements)
    print(f"{server.describe()}; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at start", flush=True)
    urls = {}
    for name, events in (("small", args.small), ("large", args.events)):
        # The small log is rebuilt every run (a second): kept, the bench's own rounds would grow it.
        kept = built_url(server, name) if name == "large" else None
        urls[name] = kept or build(server, name, events, () if args.no_catch_up else CAUGHT_UP)
    conninfos = {name: url.replace("postgresql+psycopg://", "postgresql://", 1) for name, url in urls.items()}
    sizes = {}
    for name, conninfo in conninfos.items():
        with psycopg.connect(conninfo) as connection:
            sizes[name] = connection.execute("SELECT count(*) FROM events").fetchone()[0]
    if args.prewarm:
        for name, url in urls.items():
            done = step(f"{name}: pg_prewarm of every index and of email_outbox")
            print(f" {prewarm(url) / 2**20:,.0f} MB", end="")
            done()
    print("\nlargest tables and indexes of the large log (an index's rows are its table's):")
    for relname, rows, size in table_sizes(conninfos["large"]):
        print(f"  {relname:<20} {rows:>12,} rows  {size}")
    if args.random_ids:
        use_random_ids()
    if args.statements:
        with psycopg.connect(server.uri, autocommit=True) as connection:
            connection.execute("SELECT pg_stat_statements_reset()")  # from here: the measured rounds only
    room_before = {name: free_space(conninfo) for name, conninfo in conninfos.items()}
    samples, statements = measure(urls, args.calls, args.warm, args.random_ids)
    report(samples, sizes, args.calls)
    report_room(conninfos, room_before, {name: free_space(conninfo) for name, conninfo in conninfos.items()})
    if args.statements:
        report_statements(server.uri, {name: make_url(url).database for name, url in urls.items()})
    plans = {name: explain(conninfo, statements[name]) for name, conninfo in conninfos.items()}
    report_plans(plans["large"], args.plans)
    compare_plans(plans)


if __name__ == "__main__":
    main()
