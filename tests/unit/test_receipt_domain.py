"""Idempotency keys answered by a repeat within the cooldown, in both flows.

A key answered with the open request is bound to it (``IdempotencyKeyBound``),
so that a retry of that key after the cooldown still returns the same
request; a refusal binds nothing, so a retry after ``retry_at`` succeeds.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest

from domain.decisions import Decision, Refused, RequestOutcome
from domain.request_rules import IdempotencyKeyBound
from domain.errors import ConfigError, IdempotencyMismatch
from domain.otp import RequestOtp, decide_otp_request
from domain.otp_events import OtpChallengeIssued
from domain.otp_state import fold_otp
from domain.policy import OtpPolicy, ResetPolicy
from domain.reset import RequestReset, decide_reset_request
from domain.reset_events import ResetRequested, ResetSuperseded
from domain.reset_state import fold_reset
from tests.support.keys import TEST_KEYS
from tests.support.secrets import nonce

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
KEYS = TEST_KEYS
RESET, OTP = ResetPolicy(), OtpPolicy()
USER, ALICE = "42", "alice@example.com"


def uid(n: int) -> UUID:
    return UUID(int=n)


def reset_requested(n: int, at: datetime, key: str | None = None, client: str | None = None) -> ResetRequested:
    return ResetRequested(uid(n), USER, ALICE, "k1", f"hash-{n}", at, at + RESET.ttl, uid(100 + n), key, client)


def otp_issued(n: int, at: datetime, key: str | None = None, client: str | None = None) -> OtpChallengeIssued:
    return OtpChallengeIssued(
        uid(n), USER, ALICE, "k1", OTP.digits, "login", at, at + OTP.ttl, uid(100 + n), key, client
    )


def when_reset(given: list[object], cmd: RequestReset, *, at: datetime, n: int) -> Decision:
    return decide_reset_request(
        fold_reset(given), cmd, now=at, request_id=uid(n), message_id=uid(100 + n), nonce=nonce(n), keys=KEYS,
        policy=RESET
    )


def when_otp(given: list[object], cmd: RequestOtp, *, at: datetime, n: int) -> Decision:
    return decide_otp_request(
        fold_otp(given), cmd, now=at, challenge_id=uid(n), message_id=uid(100 + n), nonce=nonce(n), keys=KEYS,
        policy=OTP
    )


def test_a_key_answered_with_the_open_reset_request_is_bound_to_it() -> None:
    at = T0 + timedelta(seconds=30)
    cmd = RequestReset(USER, ALICE, idempotency_key="k", client="app")
    decision = when_reset([reset_requested(1, T0)], cmd, at=at, n=2)

    bound = IdempotencyKeyBound("reset", USER, uid(1), uid(101), "app", "k", at)
    assert decision == Decision((bound,), (), RequestOutcome(uid(1), uid(101), T0 + RESET.ttl, reused=True))


def test_a_bound_key_replays_the_reused_request_after_the_cooldown() -> None:
    bound_at = T0 + timedelta(seconds=30)
    given = [reset_requested(1, T0), IdempotencyKeyBound("reset", USER, uid(1), uid(101), None, "k", bound_at)]
    cmd = RequestReset(USER, ALICE, idempotency_key="k")
    decision = when_reset(given, cmd, at=T0 + timedelta(minutes=5), n=2)

    assert decision == Decision((), (), RequestOutcome(uid(1), uid(101), T0 + RESET.ttl, reused=True, replayed=True))


def test_a_bound_key_with_another_recipient_is_a_mismatch() -> None:
    given = [reset_requested(1, T0), IdempotencyKeyBound("reset", USER, uid(1), uid(101), None, "k", T0)]
    with pytest.raises(IdempotencyMismatch):
        when_reset(given, RequestReset(USER, "bob@example.com", idempotency_key="k"), at=T0, n=2)


def test_a_bound_key_lives_for_the_receipt_ttl_from_when_it_was_bound() -> None:
    bound_at = T0 + timedelta(seconds=59)
    given = [reset_requested(1, T0), IdempotencyKeyBound("reset", USER, uid(1), uid(101), None, "k", bound_at)]
    cmd = RequestReset(USER, ALICE, idempotency_key="k")

    still = when_reset(given, cmd, at=T0 + RESET.receipt_ttl + timedelta(seconds=30), n=2)
    assert still.events == () and still.outcome.request_id == uid(1)
    later = when_reset(given, cmd, at=bound_at + RESET.receipt_ttl, n=3)
    assert isinstance(later.outcome, RequestOutcome) and later.outcome.request_id == uid(3)


def test_a_repeat_without_a_key_still_writes_nothing() -> None:
    decision = when_reset([reset_requested(1, T0)], RequestReset(USER, ALICE), at=T0 + timedelta(seconds=1), n=2)
    assert decision.events == ()


def test_a_refused_request_binds_its_key_to_nothing_so_a_retry_after_retry_at_succeeds() -> None:
    given: list[object] = []
    for n in range(1, 6):
        if given:
            given.append(ResetSuperseded(uid(n - 1), uid(n), "new_request"))
        given.append(reset_requested(n, T0 + timedelta(minutes=2 * n)))
    cmd = RequestReset(USER, ALICE, idempotency_key="k")

    refused = when_reset(given, cmd, at=T0 + timedelta(minutes=30), n=6)
    assert isinstance(refused.outcome, Refused)
    assert not any(isinstance(e, IdempotencyKeyBound) for e in refused.events)
    retry = when_reset([*given, *refused.events], cmd, at=refused.outcome.retry_at, n=7)
    assert isinstance(retry.outcome, RequestOutcome) and retry.outcome.request_id == uid(7)


def test_a_key_answered_with_the_open_challenge_is_bound_and_then_replayed() -> None:
    at = T0 + timedelta(seconds=10)
    cmd = RequestOtp(USER, ALICE, idempotency_key="k", client="app")
    decision = when_otp([otp_issued(1, T0)], cmd, at=at, n=2)
    bound = IdempotencyKeyBound("otp", USER, uid(1), uid(101), "app", "k", at)
    assert decision.events == (bound,) and decision.outcome.request_id == uid(1)

    replay = when_otp([otp_issued(1, T0), bound], cmd, at=T0 + timedelta(minutes=3), n=3)
    assert replay == Decision((), (), RequestOutcome(uid(1), uid(101), T0 + OTP.ttl, reused=True, replayed=True))


def test_a_bound_otp_key_with_another_purpose_is_a_mismatch() -> None:
    given = [otp_issued(1, T0), IdempotencyKeyBound("otp", USER, uid(1), uid(101), None, "k", T0)]
    with pytest.raises(IdempotencyMismatch):
        when_otp(given, RequestOtp(USER, ALICE, purpose="step_up", idempotency_key="k"), at=T0, n=2)


def test_a_key_that_created_a_request_is_not_bound_again() -> None:
    given = [otp_issued(1, T0, key="k")]
    decision = when_otp(given, RequestOtp(USER, ALICE, idempotency_key="k"), at=T0 + timedelta(seconds=5), n=2)
    assert decision.events == () and decision.outcome.replayed and not decision.outcome.reused


@pytest.mark.parametrize("policy", [ResetPolicy, OtpPolicy])
def test_a_cooldown_as_long_as_a_receipt_lives_is_refused(policy: type[ResetPolicy | OtpPolicy]) -> None:
    with pytest.raises(ConfigError, match="cooldown must be shorter than receipt_ttl"):
        policy(cooldown=timedelta(hours=2), receipt_ttl=timedelta(hours=2))
