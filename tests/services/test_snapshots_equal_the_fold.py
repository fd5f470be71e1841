"""Snapshots equal a fresh fold of their whole stream, whatever happened on it (a property, on real PostgreSQL).

Random sequences of reset requests, consumes, OTP requests, right and wrong
codes, refusals, repeats with and without keys, and time passing, under
tight limits so that refusals, counted floods and both kinds of lock occur.
A snapshot holds the fold's live part, and the request rows every request
of it; a decision on the live part and what its call looks up by key is the
decision on the whole fold, for every call one could make next.
"""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID, uuid4

import attrs
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text

from domain.errors import CodeRejected, IdempotencyMismatch, LockedOut, TokenInvalid
from domain.otp import RequestOtp, decide_otp_request, decide_otp_verify, otp_code_for, otp_delivery_verdict
from domain.otp_events import otp_stream
from domain.otp_state import fold_otp
from domain.policy import OtpPolicy, ResetPolicy
from domain.reset import RequestReset, decide_consume, decide_reset_request, decide_verify_link, reset_delivery_verdict
from domain.reset_events import PASSWORD_CHANGED, RESET_LINK, reset_stream
from domain.reset_state import fold_reset
from domain.support import decide_otp_invalidation, decide_reset_invalidation
from domain.tenants import DEFAULT_TENANT
from projections.snapshots import live_part, request_id_of, requests_of
from tests.support.secrets import otp_code_of, reset_token_of
from infra.clock import ManualClock
from infra.errors import RateLimited
from infra.eventlog.postgres import PostgresEventStore
from infra.eventlog.personal_data import key_id_of
from infra.eventlog.subject_keys import master_keys_from_environment
from infra.projector.registry import projection_named
from infra.projector.snapshots import Lookups, load_for_decision, load_snapshots, receipt_lookup
from infra.projector.verify import verify
from infra.services.otp import request_otp, verify_code
from infra.services.reset import consume_token, request_reset
from infra.services.support import invalidate_user
from infra.services.unit_of_work import ServiceContext, load_state
from tests.support.replay import assert_projections_match_log

ADA, EVE = "ada@example.test", "eve@example.test"
keys = st.sampled_from([None, "k1", "k2", "k3"])
clients = st.sampled_from([None, "app"])
operations = st.lists(st.one_of(
    st.tuples(st.just("reset"), keys, clients, st.sampled_from([ADA, EVE])),
    st.tuples(st.just("otp"), keys, clients, st.sampled_from([ADA, EVE])),
    st.tuples(st.just("consume"), st.integers(0, 5)),
    st.tuples(st.just("verify"), st.integers(0, 5), st.booleans()),
    st.tuples(st.just("wait"), st.sampled_from([1, 30, 61, 700, 1900, 3700, 2 * 86400])),
    st.tuples(st.just("invalidate")),
), min_size=1, max_size=40)


# Past the ceiling in both flows (domain.counting.FLOOD_EVENTS_PER_WINDOW), then wrong codes and a new window.
FLOODS = [("reset", None, None, ADA), ("flood", "reset", 40), ("otp", None, None, ADA), ("flood", "otp", 40),
          ("verify", 0, False), ("verify", 0, False), ("wait", 1900), ("flood", "otp", 5), ("wait", 1900),
          ("reset", "k1", None, EVE), ("flood", "reset", 3)]


def tight(ctx: ServiceContext) -> ServiceContext:
    return attrs.evolve(
        ctx,
        reset_policy=ResetPolicy(hourly_limit=3),
        otp_policy=OtpPolicy(hourly_limit=3, max_attempts=2, account_lock_threshold=3),
    )


def run(ctx: ServiceContext, clock: ManualClock, user: str, steps: list[tuple]) -> None:
    resets: list[UUID] = []
    challenges: list[UUID] = []
    for step in steps:
        try:
            match step:
                case ("reset", key, client, recipient):
                    resets.append(request_reset(ctx, RequestReset(user, recipient, key, client)).request_id)
                case ("otp", key, client, recipient):
                    challenges.append(request_otp(ctx, RequestOtp(user, recipient, "login", key, client)).request_id)
                case ("consume", n) if resets:
                    consume_token(ctx, reset_token_of(ctx.engine, ctx.keys, resets[n % len(resets)]))
                case ("verify", n, right) if challenges:
                    challenge = challenges[n % len(challenges)]
                    code = otp_code_of(ctx.engine, ctx.keys, challenge)
                    verify_code(ctx, challenge, code if right else f"{(int(code) + 1) % 10**len(code):0{len(code)}d}",
                                user_id=user)
                case ("wait", seconds):
                    clock.advance(timedelta(seconds=seconds))
                case ("flood", flow, calls):  # creates varying address and key, past the ceiling of the window
                    flood(ctx, user, flow, calls)
                case ("invalidate",):  # support withdraws whatever is open
                    invalidate_user(ctx, DEFAULT_TENANT, user, reason="ticket 1")
        except (RateLimited, TokenInvalid, CodeRejected, LockedOut, IdempotencyMismatch):
            pass  # refused, rejected or locked: what matters is what the stream holds now


def flood(ctx: ServiceContext, user: str, flow: str, calls: int) -> None:
    for n in range(calls):
        try:
            if flow == "reset":
                request_reset(ctx, RequestReset(user, (ADA, EVE)[n % 2], f"flood-{n}", "app"))
            else:
                request_otp(ctx, RequestOtp(user, (ADA, EVE)[n % 2], "login", f"flood-{n}", "app"))
        except RateLimited:
            pass


def assert_snapshot_equals_the_fold(engine: Engine, stream_id: str, fold: object) -> None:
    with engine.connect() as connection:
        store = PostgresEventStore(connection)
        history = store.load(stream_id)
        snapshot = load_snapshots(connection, [stream_id], keyring=store.keyring).get(stream_id)
        # What a decision reads, in its one statement: the same snapshot, and the stream's last version.
        read = load_for_decision(connection, [stream_id], store.keyring)[stream_id]
    assert read.snapshot == snapshot
    assert read.last_version == (history[-1].stream_version if history else 0)
    if not history:
        assert snapshot is None
        return
    assert snapshot is not None and snapshot.version == history[-1].stream_version
    whole = fold(r.event for r in history)  # type: ignore[operator]
    assert snapshot.state == live_part(whole)
    every = requests_of(whole)
    with engine.connect() as connection:  # every request's row, found by id as a decision finds one
        store = PostgresEventStore(connection)
        read = load_for_decision(connection, [stream_id], store.keyring,
                                 {stream_id: Lookups(request_ids=tuple(every))})[stream_id]
    assert {request_id_of(r): r for r in read.found} == every


def outcome(decide: object) -> object:
    """A decision, or the error it raised: what two states must agree on."""
    try:
        return decide()  # type: ignore[operator]
    except Exception as error:  # noqa: BLE001 - compared, not handled
        return (type(error), str(error))


def assert_every_next_decision_agrees(ctx: ServiceContext, user: str) -> None:
    """Each call one could make next, decided on what it reads (the live part and its look-ups) and on the
    whole fold, gives the same events and answer."""
    ctx, now, ids = tight(ctx), ctx.clock.now(), (uuid4(), uuid4(), "n" * 43)
    with ctx.engine.connect() as connection:
        reset_whole = fold_reset(r.event for r in PostgresEventStore(connection).load(reset_stream(user)))
        otp_whole = fold_otp(r.event for r in PostgresEventStore(connection).load(otp_stream(user)))
    for key in (None, "k1", "k2", "k3"):
        for client in (None, "app"):
            read_reset = load_state(ctx, reset_stream(user), fold_reset, lookups=receipt_lookup(client, key))
            read_otp = load_state(ctx, otp_stream(user), fold_otp, lookups=receipt_lookup(client, key))
            for recipient in (ADA, EVE):
                reset_cmd = RequestReset(user, recipient, key, client)
                otp_cmd = RequestOtp(user, recipient, "login", key, client)
                assert outcome(lambda s=read_reset: decide_reset_request(
                    s, reset_cmd, now=now, request_id=ids[0], message_id=ids[1], nonce=ids[2], keys=ctx.keys,
                    policy=ctx.reset_policy)) == outcome(lambda: decide_reset_request(
                    reset_whole, reset_cmd, now=now, request_id=ids[0], message_id=ids[1], nonce=ids[2],
                    keys=ctx.keys, policy=ctx.reset_policy))
                assert outcome(lambda s=read_otp: decide_otp_request(
                    s, otp_cmd, now=now, challenge_id=ids[0], message_id=ids[1], nonce=ids[2], keys=ctx.keys,
                    policy=ctx.otp_policy)) == outcome(lambda: decide_otp_request(
                    otp_whole, otp_cmd, now=now, challenge_id=ids[0], message_id=ids[1], nonce=ids[2],
                    keys=ctx.keys, policy=ctx.otp_policy))
    read_reset, read_otp = load_state(ctx, reset_stream(user), fold_reset), load_state(ctx, otp_stream(user), fold_otp)
    assert decide_reset_invalidation(read_reset, reason="ticket 2", now=now) == \
        decide_reset_invalidation(reset_whole, reason="ticket 2", now=now)
    assert decide_otp_invalidation(read_otp, reason="ticket 2", now=now) == \
        decide_otp_invalidation(otp_whole, reason="ticket 2", now=now)
    for request_id, request in reset_whole.requests.items():
        read = load_state(ctx, reset_stream(user), fold_reset, lookups=Lookups(token_hash=request.token_hash))
        assert outcome(lambda: decide_consume(read, request.token_hash, now=now, notice_message_id=ids[1])) == \
            outcome(lambda: decide_consume(reset_whole, request.token_hash, now=now, notice_message_id=ids[1]))
        assert outcome(lambda: decide_verify_link(read, request.token_hash, now=now)) == \
            outcome(lambda: decide_verify_link(reset_whole, request.token_hash, now=now))
        by_id = load_state(ctx, reset_stream(user), fold_reset, lookups=Lookups(request_ids=(request_id,)))
        for template in (RESET_LINK, PASSWORD_CHANGED):
            assert reset_delivery_verdict(by_id, request_id, now=now, template=template) == \
                reset_delivery_verdict(reset_whole, request_id, now=now, template=template)
    for challenge_id, challenge in otp_whole.challenges.items():
        read = load_state(ctx, otp_stream(user), fold_otp, lookups=Lookups(request_ids=(challenge_id,)))
        for code in (otp_code_for(challenge, ctx.keys), "0" * challenge.digits):
            assert outcome(lambda: decide_otp_verify(read, challenge_id, code, now=now, keys=ctx.keys,
                                                     policy=ctx.otp_policy)) == \
                outcome(lambda: decide_otp_verify(otp_whole, challenge_id, code, now=now, keys=ctx.keys,
                                                  policy=ctx.otp_policy))
        assert otp_delivery_verdict(read, challenge_id, now=now) == \
            otp_delivery_verdict(otp_whole, challenge_id, now=now)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=operations)
# Always this one: both flows past the ceiling of a window, wrong codes and the window closing in between.
@example(steps=FLOODS)
# And this one: support withdraws an open link and code, which are then presented, and a new request follows.
@example(steps=[("reset", None, None, ADA), ("otp", "k1", "app", ADA), ("invalidate",), ("consume", 0),
                ("verify", 0, True), ("wait", 61), ("reset", None, None, EVE), ("invalidate",)])
def test_every_snapshot_equals_a_fresh_fold_of_its_whole_stream(
    ctx: ServiceContext, engine: Engine, clock: ManualClock, steps: list[tuple]
) -> None:
    user = uuid4().hex[:12]
    run(tight(ctx), clock, user, steps)
    assert_snapshot_equals_the_fold(engine, reset_stream(user), fold_reset)
    assert_snapshot_equals_the_fold(engine, otp_stream(user), fold_otp)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=operations)
# Always at least these two. This one: used, replaced and verified requests two days older than the live part.
@example(steps=[("reset", "k1", None, ADA), ("consume", 0), ("wait", 61), ("reset", None, "app", ADA),
                ("otp", "k2", "app", ADA), ("verify", 0, True), ("otp", None, None, EVE), ("wait", 2 * 86400),
                ("reset", "k3", None, EVE), ("otp", "k1", None, ADA), ("wait", 3700), ("reset", "k2", "app", ADA)])
# And this one: both flows past the ceiling of their window.
@example(steps=FLOODS)
# And this one: both flows at the hourly limit, with replaced requests the live part keeps only the times of.
@example(steps=[("reset", None, None, ADA), ("wait", 61), ("reset", None, None, EVE), ("wait", 61),
                ("reset", "k1", "app", ADA), ("otp", None, None, ADA), ("wait", 61), ("otp", None, None, EVE),
                ("wait", 61), ("otp", "k2", None, ADA)])
# And this one: withdrawn by support, then presented, and replaced by a request of the same hour.
@example(steps=[("reset", None, None, ADA), ("otp", None, None, ADA), ("invalidate",), ("consume", 0),
                ("verify", 0, True), ("wait", 61), ("reset", "k1", None, EVE)])
def test_every_next_call_decided_on_the_live_part_and_its_look_ups_is_decided_as_on_the_whole_fold(
    ctx: ServiceContext, clock: ManualClock, steps: list[tuple]
) -> None:
    user = uuid4().hex[:12]
    run(tight(ctx), clock, user, steps)
    assert_every_next_decision_agrees(ctx, user)


def test_projections_verify_and_the_replay_check_cover_the_snapshots(
    ctx: ServiceContext, engine: Engine, admin_engine: Engine, clock: ManualClock
) -> None:
    steps = [("reset", "k1", "app", ADA), ("wait", 61), ("reset", None, None, ADA), ("consume", 0),
             ("otp", None, None, ADA), ("verify", 0, False), ("verify", 0, False), ("otp", "k2", None, ADA),
             ("verify", 1, True), ("reset", None, None, ADA), ("reset", None, None, ADA), ("reset", "k3", None, ADA),
             ("otp", None, None, EVE), ("invalidate",)]
    for user in ("1", "2"):
        run(tight(ctx), clock, user, steps)
    report = verify(admin_engine, projection_named("stream_snapshots"))
    with admin_engine.connect() as connection:
        requests = connection.execute(text(
            "SELECT count(*) FROM events WHERE event_type IN ('ResetRequested', 'OtpChallengeIssued')")).scalar_one()
    # A row per stream (two users, two flows) and one per request.
    assert report.ok and requests > 4 and report.rows == 4 + requests, report.summary()
    assert_projections_match_log(engine)


def test_a_decision_on_a_snapshot_behind_its_stream_reads_the_events_after_it(
    ctx: ServiceContext, admin_engine: Engine, clock: ManualClock
) -> None:
    # As after a rebuild, or for a stream older than snapshots: the snapshot says version 1, the stream is past it.
    first = request_reset(ctx, RequestReset("9", ADA))
    with admin_engine.connect() as connection:
        old = connection.execute(text("SELECT version, CAST(state AS text) AS state FROM stream_snapshots")).one()
    clock.advance(ctx.reset_policy.cooldown + timedelta(seconds=1))
    second = request_reset(ctx, RequestReset("9", ADA))
    assert second.request_id != first.request_id
    with admin_engine.begin() as connection:
        connection.execute(text("UPDATE stream_snapshots SET version = :version, state = CAST(:state AS jsonb)"),
                           {"version": old.version, "state": old.state})

    again = request_reset(ctx, RequestReset("9", ADA))  # within the cooldown of the second, which only the events hold
    assert again.reused and again.request_id == second.request_id


def test_a_user_with_two_data_keys_has_the_fields_sealed_under_each_opened_and_writes_with_the_oldest(
    ctx: ServiceContext, admin_engine: Engine, clock: ManualClock
) -> None:
    # Two writers that make a user's first key at once each keep their own (subject_keys.user_id is not unique).
    # Made here by hand: a second key, dated before the first, so that the user's next write seals under it.
    first = request_reset(ctx, RequestReset("8", ADA, "k1"))
    user, new_key_id = "8", "0" * 32  # the default tenant's user 8
    with admin_engine.begin() as connection:
        master_key_id, wrapped = master_keys_from_environment().wrap(user, new_key_id, AESGCM.generate_key(256))
        connection.execute(text("""
            INSERT INTO subject_keys (key_id, user_id, master_key_id, wrapped_key, created_at)
            SELECT :key_id, :user_id, :master_key_id, :wrapped, min(created_at) - interval '1 day'
              FROM subject_keys WHERE user_id = :user_id
        """), {"key_id": new_key_id, "user_id": user, "master_key_id": master_key_id, "wrapped": wrapped})
    clock.advance(ctx.reset_policy.cooldown + timedelta(seconds=1))
    second = request_reset(ctx, RequestReset("8", EVE, "k2"))

    with admin_engine.connect() as connection:
        sealed = connection.execute(text("""
            SELECT payload->>'request_id', payload->>'recipient'
              FROM events WHERE event_type = 'ResetRequested' AND payload->>'user_id' = :user_id
        """), {"user_id": user}).all()
    sealed_under = {request_id: key_id_of(envelope) for request_id, envelope in sealed}
    assert sealed_under[str(second.request_id)] == new_key_id != sealed_under[str(first.request_id)]
    assert_snapshot_equals_the_fold(ctx.engine, reset_stream(user), fold_reset)
    with ctx.engine.connect() as connection:  # the first, replaced, is a closed request: read by id
        store = PostgresEventStore(connection)
        read = load_for_decision(connection, [reset_stream(user)], store.keyring,
                                 {reset_stream(user): Lookups(request_ids=(first.request_id,))})[reset_stream(user)]
        assert store.keyring.writing_key(user)[0] == new_key_id
    assert read.snapshot is not None
    opened = [*read.snapshot.state.requests.values(), *read.found]
    assert {r.request_id: r.recipient for r in opened} == {first.request_id: ADA, second.request_id: EVE}
    # A replay of either key finds its first answer: its recipient was opened under its own key.
    assert request_reset(ctx, RequestReset("8", ADA, "k1")).request_id == first.request_id
    assert request_reset(ctx, RequestReset("8", EVE, "k2")).request_id == second.request_id
