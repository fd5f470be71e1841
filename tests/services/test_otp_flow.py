"""Email one-time codes from request to verification, on real PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, TypeVar
from uuid import uuid4

import pytest
from attrs import evolve
from sqlalchemy import Engine, text

from domain.decisions import RequestOutcome, VerifyOutcome
from domain.errors import CodeRejected, IdempotencyMismatch, InvalidInput, LockedOut
from domain.otp import RequestOtp, otp_code_for
from domain.otp_events import (
    OtpChallengeIssued,
    OtpChallengeLockedOut,
    OtpChallengeVerified,
    OtpVerificationFailed,
    otp_stream,
)
from domain.otp_state import fold_otp
from infra.clock import ManualClock
from infra.projector.snapshots import Lookups
from infra.services.otp import request_otp, verify_code
from infra.services.unit_of_work import ServiceContext, load_state
from infra.delivery.worker import Worker
from tests.support.log_reading import stream_events
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log

SENDER = "authledger <no-reply@app.test>"
ADA = "ada@example.test"
T = TypeVar("T")


def drain(ctx: ServiceContext, mailer: RecordingMailer) -> dict[str, int]:
    return Worker(ctx, mailer, sender=SENDER).drain()


def code_in(email_text: str) -> str:
    """The code stands on a line of its own."""
    return next(line for line in email_text.splitlines() if line.strip().isdigit()).strip()


def wrong(code: str) -> str:
    return str((int(code) + 1) % 10 ** len(code)).zfill(len(code))


def code_of(ctx: ServiceContext, user_id: str, outcome: RequestOutcome) -> str:
    """The code the worker would send, re-derived (for emails that are never sent)."""
    challenge = load_state(ctx, otp_stream(user_id), fold_otp,
                           lookups=Lookups(request_ids=(outcome.request_id,))).challenges[outcome.request_id]
    return otp_code_for(challenge, ctx.keys)


def event_count(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(text("SELECT count(*) FROM events")).scalar_one()


def all_at_once(n: int, call: Callable[[], T]) -> list[T | Exception]:
    """``call`` from ``n`` real threads released together; results or exceptions."""
    barrier = threading.Barrier(n)

    def one() -> T | Exception:
        barrier.wait()
        try:
            return call()
        except Exception as error:  # noqa: BLE001 - collected and asserted by the test
            return error

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(lambda _: one(), range(n)))


def test_twenty_concurrent_requests_with_one_key_make_one_challenge_and_one_email(
    ctx: ServiceContext, engine: Engine
) -> None:
    command = RequestOtp("42", ADA, idempotency_key="login-7f3a", client="app")

    answers = all_at_once(20, lambda: request_otp(ctx, command))

    assert all(isinstance(a, RequestOutcome) for a in answers), answers
    assert len({evolve(a, replayed=False) for a in answers}) == 1, "twenty identical answers"
    assert sorted(a.replayed for a in answers) == [False] + [True] * 19, "the first made it, the rest replayed"
    issued = [e for e in stream_events(engine, otp_stream("42")) if isinstance(e, OtpChallengeIssued)]
    assert len(issued) == 1
    mailer = RecordingMailer()
    assert drain(ctx, mailer) == {"sent": 1}
    assert [e.message_id for e in mailer.emails] == [answers[0].message_id]
    assert_projections_match_log(engine)


def test_the_same_key_with_another_address_is_a_mismatch_and_writes_nothing(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    request_otp(ctx, RequestOtp("42", ADA, idempotency_key="k-1", client="app"))
    clock.advance(timedelta(minutes=5))
    before = event_count(engine)

    with pytest.raises(IdempotencyMismatch):
        request_otp(ctx, RequestOtp("42", "eve@example.test", idempotency_key="k-1", client="app"))
    with pytest.raises(IdempotencyMismatch):
        request_otp(ctx, RequestOtp("42", ADA, purpose="step_up", idempotency_key="k-1", client="app"))

    assert event_count(engine) == before
    assert_projections_match_log(engine)


def test_five_wrong_codes_lock_the_challenge_and_then_the_right_code_is_refused(
    ctx: ServiceContext, engine: Engine
) -> None:
    challenge = request_otp(ctx, RequestOtp("42", ADA))
    mailer = RecordingMailer()
    drain(ctx, mailer)
    code = code_in(mailer.emails[0].text_body)

    said = []
    for _ in range(5):
        with pytest.raises(CodeRejected) as rejected:
            verify_code(ctx, challenge.request_id, wrong(code), user_id="42")
        said.append((rejected.value.attempts_left, rejected.value.message))
    with pytest.raises(CodeRejected, match="Too many wrong codes") as refused:
        verify_code(ctx, challenge.request_id, code, user_id="42")

    assert [left for left, _ in said] == [4, 3, 2, 1, 0]
    assert said[0][1] == "The code is wrong; 4 attempts left."
    assert said[3][1] == "The code is wrong; 1 attempt left."
    assert "no attempts are left" in said[4][1]
    assert refused.value.attempts_left == 0
    events = stream_events(engine, otp_stream("42"))
    assert [e.attempt for e in events if isinstance(e, OtpVerificationFailed)] == [1, 2, 3, 4, 5]
    assert [e.scope for e in events if isinstance(e, OtpChallengeLockedOut)] == ["challenge"]
    assert not any(isinstance(e, OtpChallengeVerified) for e in events)
    assert all(code not in str(message) for _, message in said)
    assert_projections_match_log(engine)


def test_a_hundred_consecutive_failures_over_several_challenges_lock_the_flow(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    # Twenty challenges of five wrong codes each; twelve minutes apart keeps
    # them under the hourly limit of five emails.
    challenges = []
    for n in range(20):
        challenge = request_otp(ctx, RequestOtp("42", ADA))
        challenges.append(challenge)
        bad = wrong(code_of(ctx, "42", challenge))
        for attempt in range(5):
            with pytest.raises(CodeRejected) as rejected:
                verify_code(ctx, challenge.request_id, bad, user_id="42")
            if (n, attempt) != (19, 4):
                assert "locked until" not in rejected.value.message, "locked before the hundredth failure"
        if n < 19:
            clock.advance(timedelta(minutes=12))

    assert "one-time codes for this account are locked until" in rejected.value.message
    failures = [e for e in stream_events(engine, otp_stream("42")) if isinstance(e, OtpVerificationFailed)]
    assert [e.consecutive_failures for e in failures] == list(range(1, 101)), "new challenges did not reset it"
    [lockout] = [e for e in stream_events(engine, otp_stream("42"))
                 if isinstance(e, OtpChallengeLockedOut) and e.scope == "account"]  # fmt: skip
    assert lockout.until == clock.now() + ctx.otp_policy.account_lock_base

    # A fresh challenge does not unlock the flow: none is issued while it lasts.
    clock.advance(timedelta(minutes=14))
    with pytest.raises(LockedOut) as locked:
        request_otp(ctx, RequestOtp("42", ADA))
    assert locked.value.retry_at == lockout.until
    with pytest.raises(LockedOut):
        verify_code(ctx, challenges[-1].request_id, code_of(ctx, "42", challenges[-1]), user_id="42")

    # After the lock, one more wrong code on a fresh challenge counts on from 100.
    clock.advance(timedelta(minutes=1))
    fresh = request_otp(ctx, RequestOtp("42", ADA))
    with pytest.raises(CodeRejected):
        verify_code(ctx, fresh.request_id, wrong(code_of(ctx, "42", fresh)), user_id="42")
    last = [e for e in stream_events(engine, otp_stream("42")) if isinstance(e, OtpVerificationFailed)][-1]
    assert last.consecutive_failures == 101
    assert verify_code(ctx, fresh.request_id, code_of(ctx, "42", fresh), user_id="42").verified
    assert_projections_match_log(engine)


def test_an_expired_challenges_code_is_refused_and_its_queued_email_skipped(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    challenge = request_otp(ctx, RequestOtp("42", ADA))
    clock.advance(ctx.otp_policy.ttl)
    mailer = RecordingMailer()

    assert drain(ctx, mailer) == {"skipped": 1}
    with pytest.raises(CodeRejected, match="expired"):
        verify_code(ctx, challenge.request_id, code_of(ctx, "42", challenge), user_id="42")

    assert mailer.emails == []
    assert stream_events(engine, f"email:{challenge.message_id}")[-1].reason == "expired"
    assert_projections_match_log(engine)


def test_a_superseded_challenges_code_is_refused_and_its_queued_email_skipped(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    older = request_otp(ctx, RequestOtp("42", ADA))
    clock.advance(ctx.otp_policy.cooldown)
    newer = request_otp(ctx, RequestOtp("42", ADA))
    assert newer.request_id != older.request_id
    mailer = RecordingMailer()

    assert drain(ctx, mailer) == {"sent": 1, "skipped": 1}
    with pytest.raises(CodeRejected, match="newer code"):
        verify_code(ctx, older.request_id, code_of(ctx, "42", older), user_id="42")

    [email] = mailer.emails
    assert email.message_id == newer.message_id
    assert stream_events(engine, f"email:{older.message_id}")[-1].reason == "superseded"
    assert verify_code(ctx, newer.request_id, code_in(email.text_body), user_id="42").verified
    assert_projections_match_log(engine)


def test_a_code_is_accepted_exactly_once_when_verifications_race(ctx: ServiceContext, engine: Engine) -> None:
    challenge = request_otp(ctx, RequestOtp("42", ADA))
    code = code_of(ctx, "42", challenge)

    results = all_at_once(8, lambda: verify_code(ctx, challenge.request_id, code, user_id="42"))

    accepted = [r for r in results if isinstance(r, VerifyOutcome)]
    refused = [r for r in results if isinstance(r, CodeRejected)]
    assert len(accepted) == 1 and accepted[0].verified
    assert len(refused) == 7 and all("already used" in r.message for r in refused), results
    verified = [e for e in stream_events(engine, otp_stream("42")) if isinstance(e, OtpChallengeVerified)]
    assert len(verified) == 1
    with pytest.raises(CodeRejected, match="already used"):
        verify_code(ctx, challenge.request_id, code, user_id="42")
    assert_projections_match_log(engine)


@pytest.mark.parametrize("challenge_id", ["not-a-uuid", "", "123e4567-e89b-12d3-a456-42661417400"])
def test_a_malformed_challenge_id_is_invalid_input_and_writes_nothing(
    ctx: ServiceContext, engine: Engine, challenge_id: Any
) -> None:
    request_otp(ctx, RequestOtp("42", ADA))
    before = event_count(engine)
    with pytest.raises(InvalidInput, match="UUID"):
        verify_code(ctx, challenge_id, "123456", user_id="42")
    assert event_count(engine) == before


@pytest.mark.parametrize("code", ["12345", "1234567", "12a456", "١٢٣٤٥٦", ""])
def test_a_malformed_code_is_invalid_input_and_counts_nothing(
    ctx: ServiceContext, engine: Engine, code: str
) -> None:
    challenge = request_otp(ctx, RequestOtp("42", ADA))
    before = event_count(engine)
    with pytest.raises(InvalidInput, match="6 digits"):
        verify_code(ctx, challenge.request_id, code, user_id="42")
    assert event_count(engine) == before


def test_an_unknown_challenge_is_refused_like_a_wrong_code(ctx: ServiceContext, engine: Engine) -> None:
    with pytest.raises(CodeRejected, match="not valid") as rejected:
        verify_code(ctx, uuid4(), "123456", user_id="42")
    assert rejected.value.attempts_left == 0
    assert event_count(engine) == 0
