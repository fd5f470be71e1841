"""One user's creates: concurrent ones, and one victim of a refusal flood (issue 13).

    .venv/bin/python bench/one_user.py [--concurrent 16] [--refusals 2000] [--rounds 3]
                                       [--victim-refusals 10000] [--samples 30] [--victims 0]
                                       [--history-users 20] [--only burst|victim|history]

Starts its own embedded PostgreSQL (the server's default durability) and,
for each flow (reset, OTP) and each kind of user, releases ``--concurrent``
creates with different idempotency keys for that one user at once, from as
many real threads calling the service functions (the HTTP API's handlers
call the same functions from its thread pool):

- a fresh user, whose stream is empty;
- a user with a long history: the hourly limit's 5 requests, then
  ``--refusals`` refusals appended directly (what as many refused creates
  leave in the log; appending them through the service would only take
  longer).

It reports the wall time of the burst, each create's latency (median and
maximum), and the answers: accepted, rate-limited, and conflicts (a
``ConcurrencyConflict`` reaching the caller, the HTTP API's 409 before this
issue). Figures are medians over ``--rounds``, each round on new users.
The policies are the defaults (5 per hour) without the cooldown, so that
every create the limit lets through issues a new request: a fresh user's
burst is 5 accepted and the rest refused.

The victim part runs sequentially, one client, on a hand-moved clock: a
victim makes the limit's 5 requests, then ``--victim-refusals`` creates are
refused through the service (0.2 s of clock apart). It reports create
latency p50 beside a fresh user's in the same run: refused creates (the
victim's against a user just at the limit), and accepted creates once the
hour has passed (the victim's against a fresh user's first). It also times
the first and last 100 refusals of the flood, and a "legacy" victim whose
refusals were appended as one event each (a stream from before counting):
its first decision folds them all and writes the snapshot, later ones read
the snapshot. With ``--victims N``, N more victims are flooded alike, one
after another, and each is timed once: its next create once the hour has
passed, the request the flood might slow, beside a brand-new user's first
and a never-flooded peer's next; half of them after the count was written
as ``serve`` writes it, the others before.

The history part (``--only history``, or with the others) asks what a
user's state costs rather than a flood: ``--history-users`` users a row
make the hourly limit's creates every hour for 1, 12, 24 or 47 hours (a
user's state once kept a closed request 48 hours, the old ``KEPT_FOR``),
and each one's next create is timed beside a brand-new user's first, in
turn.
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import uuid4

from sqlalchemy import Engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_server import start_bench_server  # after the path set-up
from domain.errors import ConcurrencyConflict
from domain.policy import OtpPolicy, ResetPolicy
from domain.otp import RequestOtp
from domain.otp_events import OtpRequestRefused, otp_stream
from domain.reset import RequestReset
from domain.reset_events import ResetRequestRefused, reset_stream
from domain.tokens import TokenKeys
from infra.clock import ManualClock
from infra.db.engine import Database
from infra.errors import RateLimited
from infra.eventlog.postgres import PostgresEventStore
from infra.services.closed_counts import write_all_closed_counts
from infra.services.otp import request_otp
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext, append_and_fold

# Personal fields are sealed under a master key from the environment: a throwaway one.
os.environ.setdefault("AUTHLEDGER_MASTER_KEY", "bench:" + base64.urlsafe_b64encode(b"b" * 32).decode().rstrip("="))
KEYS = TokenKeys("bench", {"bench": b"bench-one-user-key-0123456789abc"})
HOURLY_LIMIT = 5  # both flows' default
FLOWS = {
    "reset": (request_reset, reset_stream, ResetRequestRefused,
              lambda user, key: RequestReset(user, "user@example.com", idempotency_key=key, client="bench")),
    "otp": (request_otp, otp_stream, OtpRequestRefused,
            lambda user, key: RequestOtp(user, "user@example.com", idempotency_key=key, client="bench")),
}


def burst(ctx: ServiceContext, flow: str, user: str, concurrent: int) -> tuple[float, list[float], Counter[str]]:
    """``concurrent`` creates for ``user`` released at once: wall time, latencies, answers."""
    request, _, _, command = FLOWS[flow]
    barrier = threading.Barrier(concurrent + 1)
    latencies: list[float] = []
    answers: Counter[str] = Counter()

    def one() -> None:
        cmd = command(user, uuid4().hex)
        barrier.wait()
        started = time.perf_counter()
        try:
            request(ctx, cmd, {"actor": "bench"})
            answers["accepted"] += 1
        except RateLimited:
            answers["rate-limited"] += 1
        except ConcurrencyConflict:
            answers["conflict"] += 1
        latencies.append(time.perf_counter() - started)

    threads = [threading.Thread(target=one) for _ in range(concurrent)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, latencies, answers


def with_history(ctx: ServiceContext, flow: str, user: str, refusals: int) -> None:
    """The hourly limit's requests through the service, then ``refusals`` refusal events appended."""
    request, stream_of, refused, command = FLOWS[flow]
    for _ in range(HOURLY_LIMIT):
        request(ctx, command(user, uuid4().hex), {"actor": "bench"})
    now = datetime.now(UTC)
    for start in range(0, refusals, 500):
        events = [refused(user, "rate_limited", now, now + timedelta(hours=1))
                  for _ in range(min(500, refusals - start))]
        with ctx.engine.begin() as connection:
            version = PostgresEventStore(connection).stream_version(stream_of(user))
            append_and_fold(connection, [(stream_of(user), version, events)], {"actor": "bench"})


def timed(call: Callable[[], object]) -> float:
    """Seconds one call took; a rate-limited answer counts as an answer."""
    started = time.perf_counter()
    try:
        call()
    except RateLimited:
        pass
    return time.perf_counter() - started


def p50_ms(latencies: list[float]) -> float:
    return statistics.median(latencies) * 1000


Create = Callable[[str], Callable[[], object]]


def creates_on_a_hand_moved_clock(engine: Engine, flow: str) -> tuple[ServiceContext, ManualClock, Create]:
    """The service context, its clock, and ``create(user)``: a call that makes one create of ``flow`` for
    ``user`` with a new key."""
    clock = ManualClock()
    ctx = ServiceContext(engine=engine, keys=KEYS, clock=clock, reset_policy=ResetPolicy(cooldown=timedelta(0)),
                         otp_policy=OtpPolicy(cooldown=timedelta(0)))
    request, _, _, command = FLOWS[flow]

    def create(user: str) -> Callable[[], object]:
        return lambda: request(ctx, command(user, uuid4().hex), {"actor": "bench"})

    return ctx, clock, create


def at_the_limit(create: Create, user: str) -> None:
    for _ in range(HOURLY_LIMIT):
        create(user)()


def flood(create: Create, clock: ManualClock, user: str, refusals: int) -> list[float]:
    """``refusals`` refused creates for ``user``, 0.2 s of clock apart; each one's seconds."""
    taken = []
    for _ in range(refusals):
        taken.append(timed(create(user)))
        clock.advance(0.2)
    return taken


def next_create_rows(engine: Engine, flow: str, refusals: int, victims: int) -> list[tuple[str, float, str]]:
    """(what, create p50 in ms, note) for one flow: each victim's next create once its flood's hour has passed,
    beside a brand-new user's first create and a never-flooded peer's next, made in turn with it, same run.

    One sample a victim: its next create is the one the flood might slow,
    and each create after it keeps one request more in the victim's state
    (what ``victim_rows``' hours after the flood measure). The peer made the
    victim's requests at the same time and was not flooded. For every other
    victim the flood's count is first written to the log as ``serve`` writes
    it within a minute of the hour's end (``write_all_closed_counts``); the
    others come back before that, so their create writes it.
    """
    ctx, clock, create = creates_on_a_hand_moved_clock(engine, flow)
    brand_new: list[float] = []
    peer: list[float] = []
    victim: dict[bool, list[float]] = {True: [], False: []}  # by whether serve wrote the count first
    for n in range(victims):
        flooded, unflooded = f"next-{flow}-{uuid4().hex[:8]}", f"peer-{flow}-{uuid4().hex[:8]}"
        at_the_limit(create, flooded)
        at_the_limit(create, unflooded)
        flood(create, clock, flooded, refusals)
        clock.advance(timedelta(hours=1, seconds=1))
        written_first = n % 2 == 0
        if written_first:
            write_all_closed_counts(ctx)
        turn = [(brand_new, create(f"fresh-{flow}-{uuid4().hex[:8]}")), (peer, create(unflooded)),
                (victim[written_first], create(flooded))]
        for latencies, call in turn[n % 3:] + turn[:n % 3]:  # none always goes first
            latencies.append(timed(call))
    rows = [("brand-new user: first create (accepted)", p50_ms(brand_new), "baseline"),
            ("peer, same requests, no flood: next create (accepted)", p50_ms(peer),
             f"{p50_ms(peer) / p50_ms(brand_new):.2f}× baseline")]
    for written_first, when in ((True, "count written by serve first"), (False, "back before serve wrote the count")):
        if victim[written_first]:
            p50 = p50_ms(victim[written_first])
            what = f"{len(victim[written_first])} victims, {when}: next create after {refusals} refusals (accepted)"
            rows.append((what, p50, f"{p50 / p50_ms(brand_new):.2f}× baseline, {p50 / p50_ms(peer):.2f}× peer"))
    return rows


def victim_rows(engine: Engine, flow: str, refusals: int, samples: int) -> list[tuple[str, float, str]]:
    """(what, create p50 in ms, note) for one flow: the victim beside fresh users, same run."""
    ctx, clock, create = creates_on_a_hand_moved_clock(engine, flow)
    _, stream_of, _, _ = FLOWS[flow]
    victim = f"victim-{flow}-{uuid4().hex[:8]}"
    at_the_limit(create, victim)
    flooded = flood(create, clock, victim, refusals)
    rows = [("victim: refusals 1-100 of the flood", p50_ms(flooded[:100]), ""),
            (f"victim: refusals {refusals - 99}-{refusals} of the flood", p50_ms(flooded[-100:]), "")]
    fresh_at_limit = f"fresh-{flow}-{uuid4().hex[:8]}"
    at_the_limit(create, fresh_at_limit)
    fresh_refused, victim_refused = [], []
    for _ in range(samples):  # interleaved, so that the machine's noise falls on both alike
        fresh_refused.append(timed(create(fresh_at_limit)))
        victim_refused.append(timed(create(victim)))
    rows += [("fresh user at the limit: refused create", p50_ms(fresh_refused), "baseline"),
             (f"victim after {refusals} refusals: refused create", p50_ms(victim_refused),
              f"{p50_ms(victim_refused) / p50_ms(fresh_refused):.2f}× baseline")]
    # A peer made the victim's requests, hour by hour, but was never flooded: it isolates the flood's cost.
    fresh_accepted, peer_accepted, victim_accepted = [], [], []
    while len(victim_accepted) < samples:
        clock.advance(timedelta(hours=1, seconds=1))
        for _ in range(HOURLY_LIMIT):
            fresh_accepted.append(timed(create(f"fresh-{flow}-{uuid4().hex[:8]}")))
            peer_accepted.append(timed(create(fresh_at_limit)))
            victim_accepted.append(timed(create(victim)))
    rows += [("brand-new user: first create (accepted)", p50_ms(fresh_accepted), "baseline"),
             ("peer, same requests, no flood: create (accepted)", p50_ms(peer_accepted),
              f"{p50_ms(peer_accepted) / p50_ms(fresh_accepted):.2f}× baseline"),
             (f"victim after {refusals} refusals: create (accepted)", p50_ms(victim_accepted),
              f"{p50_ms(victim_accepted) / p50_ms(fresh_accepted):.2f}× baseline, "
              f"{p50_ms(victim_accepted) / p50_ms(peer_accepted):.2f}× peer")]
    with engine.connect() as connection:
        length = PostgresEventStore(connection).stream_version(stream_of(victim))
    rows.append(("victim's stream, events in all", float(length), "after the flood and the accepted creates"))
    legacy = f"legacy-{flow}-{uuid4().hex[:8]}"
    with_history(ctx, flow, legacy, refusals)
    with engine.begin() as connection:  # a stream from before snapshots: nothing but its events
        connection.execute(text("DELETE FROM stream_snapshots WHERE stream_id = :s"), {"s": stream_of(legacy)})
    first = timed(create(legacy))
    later = [timed(create(legacy)) for _ in range(samples)]
    rows += [(f"legacy victim ({refusals} refusal events): first create", first * 1000, "folds all, writes snapshot"),
             ("legacy victim: later creates", p50_ms(later),
              f"{p50_ms(later) / p50_ms(fresh_refused):.2f}× fresh refused")]
    return rows


HISTORY_HOURS = (1, 12, 24, 47)  # hours at the hourly limit before the timed create; state once kept 48 h


def history_rows(engine: Engine, flow: str, users: int) -> list[tuple[str, float, str]]:
    """(what, create p50 in ms, note) for one flow: the next create of users who made the hourly limit's
    creates every hour for ``HISTORY_HOURS``, beside a brand-new user's first, made in turn with them."""
    _, clock, create = creates_on_a_hand_moved_clock(engine, flow)
    by_hours = {hours: [f"history-{flow}-{hours}-{uuid4().hex[:8]}" for _ in range(users)] for hours in HISTORY_HOURS}
    for hour in range(max(HISTORY_HOURS), 0, -1):  # the longest histories start first; all end now
        for hours, names in by_hours.items():
            if hours >= hour:
                for name in names:
                    at_the_limit(create, name)
        clock.advance(timedelta(hours=1, seconds=1))
    brand_new: list[float] = []
    latencies: dict[int, list[float]] = {hours: [] for hours in HISTORY_HOURS}
    for n in range(users):
        turn = [(brand_new, create(f"fresh-{flow}-{uuid4().hex[:8]}"))]
        turn += [(latencies[hours], create(names[n])) for hours, names in by_hours.items()]
        for timings, call in turn[n % len(turn):] + turn[:n % len(turn)]:  # none always goes first
            timings.append(timed(call))
    rows = [("brand-new user: first create (accepted)", p50_ms(brand_new), "baseline")]
    for hours, timings in latencies.items():
        requests = hours * HOURLY_LIMIT
        rows.append((f"user with {requests} requests over {hours} h: next create (accepted)", p50_ms(timings),
                     f"{p50_ms(timings) / p50_ms(brand_new):.2f}× baseline"))
    # What each of an attacker's calls costs the server: a refused create, once the hour's limit is reached.
    at_limit = [f"fresh-{flow}-{uuid4().hex[:8]}" for _ in range(users)]
    for name in at_limit + by_hours[max(HISTORY_HOURS)]:
        for _ in range(HOURLY_LIMIT - (name not in at_limit)):  # the longest histories made one create above
            create(name)()
    refused: dict[str, list[float]] = {"fresh": [], "longest": []}
    for fresh_name, long_name in zip(at_limit, by_hours[max(HISTORY_HOURS)], strict=True):
        for kind, name in (("fresh", fresh_name), ("longest", long_name)):
            refused[kind].append(timed(create(name)))
    rows += [("user at the limit, no history: refused create", p50_ms(refused["fresh"]), "baseline"),
             (f"user with {max(HISTORY_HOURS) * HOURLY_LIMIT + HOURLY_LIMIT} requests: refused create",
              p50_ms(refused["longest"]), f"{p50_ms(refused['longest']) / p50_ms(refused['fresh']):.2f}× baseline")]
    return rows


def run_history(engine: Engine, users: int) -> None:
    print(f"\nusers at the hourly limit for hours vs a brand-new user, sequential, one client; p50 of {users} "
          "creates a row\n")
    print("| flow | what | create p50 (ms) | note |")
    print("|---|---|---:|---|")
    for flow in FLOWS:
        for what, value, note in history_rows(engine, flow, users):
            print(f"| {flow} | {what} | {value:.2f} | {note} |")


def run_victims(engine: Engine, refusals: int, samples: int, victims: int) -> None:
    print(f"\nvictim of {refusals} refusals vs fresh users, sequential, one client; p50 of {samples}+ creates "
          f"({victims} for each victim's next create)\n")
    print("| flow | what | create p50 (ms) | note |")
    print("|---|---|---:|---|")
    for flow in FLOWS:
        rows = victim_rows(engine, flow, refusals, samples)
        if victims:
            rows += next_create_rows(engine, flow, refusals, victims)
        for what, value, note in rows:
            figure = f"{value:.0f}" if what.startswith("victim's stream") else f"{value:.2f}"
            print(f"| {flow} | {what} | {figure} | {note} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrent", type=int, default=16, help="creates released at once (default 16)")
    parser.add_argument("--refusals", type=int, default=2000, help="refusals in the long history (default 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each on new users (default 3)")
    parser.add_argument("--victim-refusals", type=int, default=10_000, help="the victim's flood (default 10000)")
    parser.add_argument("--samples", type=int, default=30, help="creates per victim figure (default 30)")
    parser.add_argument("--victims", type=int, default=0,
                        help="victims flooded one after another, each timed on its next create (default 0: "
                             "each takes a whole flood)")
    parser.add_argument("--history-users", type=int, default=20,
                        help="users a row in the history part, each timed once (default 20)")
    parser.add_argument("--only", choices=("burst", "victim", "history"), help="run one part only")
    args = parser.parse_args()
    counts = (args.concurrent, args.refusals, args.rounds, args.victim_refusals, args.samples, args.history_users)
    if min(counts) < 1 or args.victims < 0:
        parser.error("--victims takes 0 or more, and every other count 1 or more")
    server = start_bench_server("authledger-bench-one-user-")
    database = Database(server.create_database("bench_one_user"))
    engine = database.engine(pool_size=args.concurrent + 2)
    no_cooldown = {"cooldown": timedelta(0), "hourly_limit": HOURLY_LIMIT}
    ctx = ServiceContext(engine=engine, keys=KEYS, reset_policy=ResetPolicy(**no_cooldown),
                         otp_policy=OtpPolicy(**no_cooldown))
    print(server.describe())
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} at start; {args.concurrent} creates "
          f"at once, different keys, one user; {args.rounds} rounds, medians\n")
    if args.only in (None, "victim"):
        run_victims(engine, args.victim_refusals, args.samples, args.victims)
    if args.only in (None, "history"):
        run_history(engine, args.history_users)
    if args.only in (None, "burst"):
        run_bursts(ctx, args)
    engine.dispose()


def run_bursts(ctx: ServiceContext, args: argparse.Namespace) -> None:
    print("\n| flow | user | burst wall (s) | latency p50 (ms) | latency max (ms) | accepted | 429 | conflicts |")
    print("|---|---|---|---|---|---|---|---|")
    for flow in FLOWS:
        for kind in ("fresh", f"{args.refusals} refusals"):
            rounds = []
            for _ in range(args.rounds):
                user = f"{flow}-{uuid4().hex[:8]}"
                if kind != "fresh":
                    with_history(ctx, flow, user, args.refusals)
                rounds.append(burst(ctx, flow, user, args.concurrent))
            wall = statistics.median(r[0] for r in rounds)
            p50 = statistics.median(statistics.median(r[1]) for r in rounds) * 1000
            worst = statistics.median(max(r[1]) for r in rounds) * 1000
            answers = sum((r[2] for r in rounds), Counter())
            print(f"| {flow} | {kind} | {wall:.2f} | {p50:.0f} | {worst:.0f} | {answers['accepted']} "
                  f"| {answers['rate-limited']} | {answers['conflict']} |")


if __name__ == "__main__":
    main()
