"""Links and codes on real PostgreSQL: a secret nonce in each, erasure kills them, rejected presentations recorded.

A token or code is derived from the key, the request id and a per-request
nonce sealed under the user's data key (derivation 2), so `privacy forget`
leaves no way to derive an outstanding link or code: it is answered as an
unknown one. A known link or code presented when it can no longer be used
is refused as before, and the refusal is recorded on its request's stream
with the caller's metadata; a flood of them is counted, not logged one by one.
"""

from __future__ import annotations

import json
from datetime import timedelta
from uuid import uuid4

import attrs
import pytest
from sqlalchemy import Engine, text

from domain.counting import REJECTIONS_PER_WINDOW, RequestsCounted
from domain.errors import CodeRejected, LockedOut, TokenInvalid
from domain.otp import RequestOtp
from domain.otp_events import OtpCodeRejected, otp_stream
from domain.policy import OtpPolicy
from domain.reset import RequestReset
from domain.reset_events import ResetTokenRejected, reset_stream
from domain.tokens import SecretUnavailable, derive_otp_code, derive_reset_token, hash_token
from infra.clock import ManualClock
from infra.delivery.worker import Worker
from infra.projector.rebuild import rebuild
from infra.projector.registry import projection_named
from infra.review.history import explain, history
from infra.services.otp import request_otp, verify_code
from infra.services.privacy import forget
from infra.services.reset import consume_token, request_reset, verify_token
from infra.services.unit_of_work import ServiceContext
from tests.support.cli import Env, run_cli
from tests.support.log_reading import stream_events
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log
from tests.support.secrets import otp_code_of, reset_token_of

ADA = "ada@example.test"
SENDER = "authledger <no-reply@app.test>"
APP = {"client": "shop", "actor": "client:shop", "request_id": "req-1", "correlation_id": "req-1"}


def rows(engine: Engine, event_type: str) -> list[tuple[dict, dict]]:
    with engine.connect() as connection:
        return [tuple(row) for row in connection.execute(text(
            "SELECT payload, metadata FROM events WHERE event_type = :t ORDER BY global_position"), {"t": event_type})]


def stream_length(engine: Engine, stream_id: str) -> int:
    with engine.connect() as connection:
        return connection.execute(
            text("SELECT count(*) FROM events WHERE stream_id = :s"), {"s": stream_id}).scalar_one()


def to_the_next_hour(clock: ManualClock) -> None:
    now = clock.now()
    clock.advance(now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1) - now)


# -- the nonce --------------------------------------------------------------------------------------


def test_a_new_link_and_code_are_not_what_the_key_and_the_public_id_alone_derive(
    ctx: ServiceContext, engine: Engine
) -> None:
    reset = request_reset(ctx, RequestReset("42", ADA))
    challenge = request_otp(ctx, RequestOtp("42", ADA))
    token = reset_token_of(engine, ctx.keys, reset.request_id)
    code = otp_code_of(engine, ctx.keys, challenge.request_id)

    assert token != derive_reset_token(ctx.keys.current, reset.request_id)
    [requested] = rows(engine, "ResetRequested")
    assert requested[0]["derivation"] == 2 and requested[0]["nonce"].startswith("enc:v1:")
    assert requested[0]["token_hash"] == hash_token(token)
    assert verify_token(ctx, token).request_id == reset.request_id
    with pytest.raises(TokenInvalid, match="not valid"):
        verify_token(ctx, derive_reset_token(ctx.keys.current, reset.request_id))
    attacker = derive_otp_code(ctx.keys.current, challenge.request_id, 6)
    if attacker != code:  # one in a million they agree by chance
        with pytest.raises(CodeRejected, match="wrong"):
            verify_code(ctx, challenge.request_id, attacker, user_id="42")
    assert verify_code(ctx, challenge.request_id, code, user_id="42").verified
    assert_projections_match_log(engine)


def test_each_request_gets_its_own_nonce(ctx: ServiceContext, engine: Engine, clock: ManualClock) -> None:
    request_reset(ctx, RequestReset("42", ADA))
    clock.advance(120)
    request_reset(ctx, RequestReset("42", ADA))
    first, second = [e for e in stream_events(engine, reset_stream("42")) if hasattr(e, "nonce")]
    assert first.nonce != second.nonce and len(first.nonce) == len(second.nonce) == 43


# -- erasure ----------------------------------------------------------------------------------------


def test_after_erasure_the_outstanding_link_and_code_no_longer_verify_or_consume(
    ctx: ServiceContext, engine: Engine
) -> None:
    reset = request_reset(ctx, RequestReset("42", ADA))
    challenge = request_otp(ctx, RequestOtp("42", ADA))
    token = reset_token_of(engine, ctx.keys, reset.request_id)
    code = otp_code_of(engine, ctx.keys, challenge.request_id)
    request_reset(ctx, RequestReset("43", ADA))  # another user, untouched

    forget(ctx, "42", reason="the user asked to be forgotten")

    for attempt in (lambda: verify_token(ctx, token, APP), lambda: consume_token(ctx, token, APP)):
        with pytest.raises(TokenInvalid) as refused:
            attempt()
        assert str(refused.value) == "The reset link is not valid.", "the answer to an unknown link"
    with pytest.raises(CodeRejected) as rejected:
        verify_code(ctx, challenge.request_id, code, APP, user_id="42")
    assert (str(rejected.value), rejected.value.attempts_left) == ("The code is not valid.", 0)
    with pytest.raises(SecretUnavailable):  # nobody can derive it now, the worker included
        reset_token_of(engine, ctx.keys, reset.request_id)
    assert [p["reason"] for p, _ in rows(engine, "ResetTokenRejected")] == ["erased", "erased"]
    assert [p["reason"] for p, _ in rows(engine, "OtpCodeRejected")] == ["erased"]
    assert not any(type(e).__name__ in ("ResetCompleted", "OtpChallengeVerified", "OtpVerificationFailed")
                   for e in stream_events(engine, reset_stream("42")) + stream_events(engine, otp_stream("42")))
    mailer = RecordingMailer()
    assert Worker(ctx, mailer, sender=SENDER).drain() == {"skipped": 2, "sent": 1}, "only user 43's link is sent"
    assert_projections_match_log(engine)


# -- rejected presentations -------------------------------------------------------------------------


def test_a_used_superseded_or_expired_link_presented_again_records_one_event_with_the_caller(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    used = request_reset(ctx, RequestReset("1", ADA))
    used_token = reset_token_of(engine, ctx.keys, used.request_id)
    consume_token(ctx, used_token)
    superseded = request_reset(ctx, RequestReset("2", ADA))
    superseded_token = reset_token_of(engine, ctx.keys, superseded.request_id)
    clock.advance(120)
    request_reset(ctx, RequestReset("2", ADA))
    expired = request_reset(ctx, RequestReset("3", ADA))
    expired_token = reset_token_of(engine, ctx.keys, expired.request_id)
    clock.advance(ctx.reset_policy.ttl)

    said = {}
    for name, token in (("used", used_token), ("superseded", superseded_token), ("expired", expired_token)):
        with pytest.raises(TokenInvalid) as refused:
            consume_token(ctx, token, {**APP, "request_id": f"req-{name}"})
        said[name] = str(refused.value)

    assert said == {"used": "The reset link was already used.",
                    "superseded": "The reset link was replaced by a newer one or is no longer valid.",
                    "expired": "The reset link has expired."}, "the answers are those of before"
    recorded = rows(engine, "ResetTokenRejected")
    assert [(p["request_id"], p["reason"]) for p, _ in recorded] == [
        (str(used.request_id), "used"), (str(superseded.request_id), "superseded"),
        (str(expired.request_id), "expired")]
    assert [(m["client"], m["request_id"]) for _, m in recorded] == [
        ("shop", "req-used"), ("shop", "req-superseded"), ("shop", "req-expired")]
    assert_projections_match_log(engine)


@pytest.mark.parametrize("reason", ["used", "superseded", "expired", "locked"])
def test_a_code_of_a_challenge_no_longer_usable_records_one_event_with_the_caller_and_costs_no_attempt(
    ctx: ServiceContext, engine: Engine, clock: ManualClock, reason: str
) -> None:
    challenge = request_otp(ctx, RequestOtp("42", ADA))
    code = otp_code_of(engine, ctx.keys, challenge.request_id)
    wrong = str((int(code) + 1) % 10**6).zfill(6)
    if reason == "used":
        verify_code(ctx, challenge.request_id, code, user_id="42")
    elif reason == "superseded":
        clock.advance(120)
        request_otp(ctx, RequestOtp("42", ADA))
    elif reason == "expired":
        clock.advance(ctx.otp_policy.ttl)
    else:
        for _ in range(ctx.otp_policy.max_attempts):
            with pytest.raises(CodeRejected):
                verify_code(ctx, challenge.request_id, wrong, user_id="42")
    failures = len(rows(engine, "OtpVerificationFailed"))

    with pytest.raises(CodeRejected) as rejected:
        verify_code(ctx, challenge.request_id, code, APP, user_id="42")

    assert rejected.value.attempts_left == 0 and code not in str(rejected.value)
    [(payload, metadata)] = rows(engine, "OtpCodeRejected")
    assert (payload["challenge_id"], payload["reason"]) == (str(challenge.request_id), reason)
    assert (metadata["client"], metadata["request_id"]) == ("shop", "req-1")
    assert len(rows(engine, "OtpVerificationFailed")) == failures, "the code was not even checked"
    assert_projections_match_log(engine)


def test_a_code_presented_while_the_whole_account_is_locked_is_answered_429_as_before_and_recorded(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    locking = attrs.evolve(ctx, otp_policy=OtpPolicy(account_lock_threshold=3))
    challenge = request_otp(locking, RequestOtp("42", ADA))
    code = otp_code_of(engine, ctx.keys, challenge.request_id)
    wrong = str((int(code) + 1) % 10**6).zfill(6)
    for _ in range(3):  # the third wrong code in a row locks the account's codes
        with pytest.raises(CodeRejected):
            verify_code(locking, challenge.request_id, wrong, user_id="42")
    clock.advance(5)

    with pytest.raises(LockedOut) as locked:
        verify_code(locking, challenge.request_id, code, APP, user_id="42")

    assert locked.value.retry_at is not None and code not in str(locked.value)
    [(payload, metadata)] = rows(engine, "OtpCodeRejected")
    assert (payload["challenge_id"], payload["reason"]) == (str(challenge.request_id), "account_locked")
    assert (metadata["client"], metadata["request_id"]) == ("shop", "req-1")
    told = history(engine, "42", now=clock.now()).render()
    assert (f"The code of OTP challenge {challenge.request_id} was presented again at "
            f"{clock.now().isoformat(sep=' ', timespec='milliseconds')} by client:shop after it was locked for the "
            "whole account; it was refused.") in told
    assert_projections_match_log(engine)


def test_an_unknown_token_or_challenge_writes_nothing(ctx: ServiceContext, engine: Engine) -> None:
    with engine.connect() as connection:
        before = connection.execute(text("SELECT count(*) FROM events")).scalar_one()
    with pytest.raises(TokenInvalid):
        consume_token(ctx, "A" * 43, APP)
    with pytest.raises(CodeRejected):
        verify_code(ctx, uuid4(), "123456", APP, user_id="42")
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM events")).scalar_one() == before


def test_a_flood_of_presentations_of_a_used_link_cannot_grow_its_stream_without_limit(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    to_the_next_hour(clock)  # the flood falls in one window
    request = request_reset(ctx, RequestReset("42", ADA))
    token = reset_token_of(engine, ctx.keys, request.request_id)
    consume_token(ctx, token)
    before = stream_length(engine, reset_stream("42"))

    for n in range(500):
        with pytest.raises(TokenInvalid, match="already used"):
            (verify_token if n % 2 else consume_token)(ctx, token, {**APP, "client": f"c{n % 3}"})
        clock.advance(1)

    assert stream_length(engine, reset_stream("42")) - before == REJECTIONS_PER_WINDOW
    clock.advance(120)
    request_reset(ctx, RequestReset("42", ADA))  # the stream's next event first writes the count
    [counted] = [e for e in stream_events(engine, reset_stream("42")) if isinstance(e, RequestsCounted)]
    assert (counted.answer, counted.count) == ("rejected", 500 - REJECTIONS_PER_WINDOW)
    assert set(counted.clients) == {"c0", "c1", "c2"}
    assert sum(isinstance(e, ResetTokenRejected) for e in stream_events(engine, reset_stream("42"))) == 10
    told = history(engine, "42", now=clock.now()).render()
    assert f"{500 - REJECTIONS_PER_WINDOW} further presentations of reset links no longer usable were refused" in told
    assert_projections_match_log(engine)


def test_a_flood_of_codes_for_a_locked_challenge_is_bounded_too(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    to_the_next_hour(clock)
    strict = attrs.evolve(ctx, otp_policy=OtpPolicy(max_attempts=3))
    challenge = request_otp(strict, RequestOtp("42", ADA))
    for _ in range(500):
        with pytest.raises(CodeRejected):
            verify_code(strict, challenge.request_id, "000000", APP, user_id="42")
    events = stream_events(engine, otp_stream("42"))
    assert sum(isinstance(e, OtpCodeRejected) for e in events) == REJECTIONS_PER_WINDOW
    assert len(events) <= 1 + 3 + 1 + REJECTIONS_PER_WINDOW
    assert_projections_match_log(engine)


def test_history_and_explain_tell_a_link_presented_again_after_it_was_used(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    request = request_reset(ctx, RequestReset("42", ADA))
    token = reset_token_of(engine, ctx.keys, request.request_id)
    consume_token(ctx, token)
    clock.advance(5)
    with pytest.raises(TokenInvalid):
        consume_token(ctx, token, APP)

    said = (f"The link of reset request {request.request_id} was presented again at "
            f"{clock.now().isoformat(sep=' ', timespec='milliseconds')} by client:shop after it was used; "
            "it was refused.")
    assert said in history(engine, "42", now=clock.now()).render()
    review = explain(engine, request_id=request.request_id, now=clock.now())
    assert said in [f.sentence for f in review.findings]
    assert "ResetTokenRejected" in [entry.event_type for entry in review.timeline]


def test_history_tells_a_code_presented_for_a_superseded_challenge(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    first = request_otp(ctx, RequestOtp("42", ADA))
    code = otp_code_of(engine, ctx.keys, first.request_id)
    clock.advance(120)
    request_otp(ctx, RequestOtp("42", ADA))
    with pytest.raises(CodeRejected):
        verify_code(ctx, first.request_id, code, APP, user_id="42")
    told = history(engine, "42", now=clock.now()).render()
    assert (f"The code of OTP challenge {first.request_id} was presented again at "
            f"{clock.now().isoformat(sep=' ', timespec='milliseconds')} by client:shop after it was superseded; "
            "it was refused.") in told
    assert code not in told


# -- data from before -------------------------------------------------------------------------------


def test_requests_made_before_nonces_still_verify_and_the_projections_and_audit_agree(
    ctx: ServiceContext, engine: Engine, admin_engine: Engine, clock: ManualClock, env: Env
) -> None:
    now, reset_id, challenge_id = clock.now(), uuid4(), uuid4()
    v1_token = derive_reset_token(ctx.keys.current, reset_id)
    v1_code = derive_otp_code(ctx.keys.current, challenge_id, 6)
    common = {"user_id": "42", "recipient": ADA, "key_id": ctx.keys.current_id, "idempotency_key": None,
              "client": None, "expires_at": (now + timedelta(minutes=10)).isoformat()}
    # Payloads as an authledger before nonces wrote them: ResetRequested 1, OtpChallengeIssued 2.
    written = [
        (reset_stream("42"), "ResetRequested", 1, {**common, "request_id": str(reset_id), "message_id": str(uuid4()),
                                                    "token_hash": hash_token(v1_token),
                                                    "requested_at": now.isoformat()}),
        (otp_stream("42"), "OtpChallengeIssued", 2, {**common, "challenge_id": str(challenge_id), "digits": 6,
                                                      "message_id": str(uuid4()), "purpose": "login",
                                                      "issued_at": now.isoformat()}),
    ]
    with admin_engine.begin() as connection:
        for stream, event_type, version, payload in written:
            connection.execute(text("""
                INSERT INTO events (stream_id, stream_version, event_id, event_type, schema_version, payload)
                VALUES (:stream, 1, gen_random_uuid(), :event_type, :version, CAST(:payload AS jsonb))
            """), {"stream": stream, "event_type": event_type, "version": version, "payload": json.dumps(payload)})
    for name in ("reset_tokens", "otp_challenges", "stream_snapshots"):
        rebuild(admin_engine, projection_named(name))

    assert verify_token(ctx, v1_token).request_id == reset_id
    assert verify_code(ctx, challenge_id, v1_code, user_id="42").verified
    assert consume_token(ctx, v1_token).request_id == reset_id
    with pytest.raises(TokenInvalid, match="already used"):
        consume_token(ctx, v1_token)
    assert_projections_match_log(engine)
    for args in (("projections", "verify"), ("audit", "seal"), ("audit", "verify")):
        result = run_cli(env, *args)
        assert result.exit_code == 0, (args, result.output)
