"""Email OTP rules, as given events / when a command / then events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

import attrs
import pytest

from domain.counting import REJECTIONS_PER_WINDOW
from domain.decisions import Counted, Decision, Refused, Rejected, RequestOutcome, VerifyOutcome
from domain.email import EmailQueued
from domain.errors import (
    CodeRejected,
    ConfigError,
    IdempotencyMismatch,
    InvalidInput,
    LockedOut,
    UnknownEventType,
)
from domain.otp import RequestOtp, decide_otp_request, decide_otp_verify, otp_code_for, otp_delivery_verdict
from domain.otp_events import (
    OtpChallengeIssued,
    OtpChallengeLockedOut,
    OtpChallengeSuperseded,
    OtpChallengeVerified,
    OtpCodeRejected,
    OtpRequestRefused,
    OtpVerificationFailed,
    otp_stream,
)
from domain.otp_state import fold_otp
from domain.policy import OtpPolicy
from domain.tokens import SecretUnavailable, derive_otp_code
from tests.support.keys import TEST_KEYS
from tests.support.secrets import nonce

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
KEYS = TEST_KEYS
POLICY = OtpPolicy()
USER = "42"
ALICE = "alice@example.com"


def cid(n: int) -> UUID:
    return UUID(int=n)


def mid(n: int) -> UUID:
    return UUID(int=1000 + n)


def issued(n: int, at: datetime, *, purpose: str = "login", recipient: str = ALICE,
           key_id: str = "k2", idempotency_key: str | None = None) -> OtpChallengeIssued:  # fmt: skip
    """An OtpChallengeIssued as decide_otp_request would have written it."""
    return OtpChallengeIssued(
        cid(n), USER, recipient, key_id, POLICY.digits, purpose, at, at + POLICY.ttl, mid(n), idempotency_key, None,
        derivation=2, nonce=nonce(n),
    )


def right_code(n: int, key_id: str = "k2") -> str:
    return derive_otp_code(KEYS.key(key_id), cid(n), POLICY.digits, nonce(n))


def wrong_code(n: int) -> str:
    return str((int(right_code(n)) + 1) % 10**POLICY.digits).zfill(POLICY.digits)


def when_requested(given: list[object], cmd: RequestOtp, *, at: datetime, n: int) -> Decision:
    return decide_otp_request(
        fold_otp(given), cmd, now=at, challenge_id=cid(n), message_id=mid(n), nonce=nonce(n), keys=KEYS,
        policy=POLICY,
    )  # fmt: skip


def when_verified(given: list[object], n: int, code: str, *, at: datetime) -> Decision:
    return decide_otp_verify(fold_otp(given), cid(n), code, now=at, keys=KEYS, policy=POLICY)


def test_the_stream_of_a_users_challenges_is_named_after_the_user() -> None:
    assert otp_stream("42") == "otp-user:42"


def test_a_first_request_issues_a_challenge_and_queues_the_code_email() -> None:
    decision = when_requested([], RequestOtp(USER, ALICE), at=T0, n=1)

    assert decision.events == (issued(1, T0),)
    assert decision.emails == (EmailQueued(mid(1), "otp", "otp_code", USER, cid(1), ALICE, available_at=T0),)
    assert decision.outcome == RequestOutcome(cid(1), mid(1), T0 + timedelta(minutes=10), reused=False)


def test_the_code_itself_is_written_nowhere() -> None:
    decision = when_requested([], RequestOtp(USER, ALICE), at=T0, n=1)
    assert all(right_code(1) not in repr(r) for r in (*decision.events, *decision.emails))


def test_a_new_request_supersedes_the_open_challenge() -> None:
    decision = when_requested([issued(1, T0)], RequestOtp(USER, ALICE), at=T0 + timedelta(minutes=2), n=2)

    assert decision.events == (OtpChallengeSuperseded(cid(1), cid(2)), issued(2, T0 + timedelta(minutes=2)))


def test_a_repeat_within_the_cooldown_reuses_the_open_challenge_and_writes_nothing() -> None:
    decision = when_requested([issued(1, T0)], RequestOtp(USER, ALICE), at=T0 + timedelta(seconds=30), n=2)

    assert decision == Decision((), (), RequestOutcome(cid(1), mid(1), T0 + POLICY.ttl, reused=True))


def test_a_repeat_within_the_cooldown_for_another_purpose_issues_a_new_challenge() -> None:
    cmd = RequestOtp(USER, ALICE, purpose="step_up")
    decision = when_requested([issued(1, T0)], cmd, at=T0 + timedelta(seconds=30), n=2)

    assert decision.events[-1] == issued(2, T0 + timedelta(seconds=30), purpose="step_up")


def test_the_sixth_request_within_an_hour_is_refused() -> None:
    given: list[object] = [issued(n, T0 + timedelta(minutes=2 * n)) for n in range(1, 6)]
    now = T0 + timedelta(minutes=20)
    decision = when_requested(given, RequestOtp(USER, ALICE), at=now, n=6)

    retry_at = T0 + timedelta(hours=1, minutes=2)
    assert decision == Decision(
        (OtpRequestRefused(USER, "rate_limited", now, retry_at),), (), Refused("rate_limited", retry_at)
    )


def test_an_idempotent_replay_returns_the_original_outcome_marked_only_as_a_replay() -> None:
    given = [issued(1, T0, idempotency_key="k")]
    cmd = RequestOtp(USER, ALICE, idempotency_key="k")
    decision = when_requested(given, cmd, at=T0 + timedelta(minutes=5), n=2)

    assert decision == Decision((), (), RequestOutcome(cid(1), mid(1), T0 + POLICY.ttl, reused=False, replayed=True))


@pytest.mark.parametrize(
    "cmd",
    [
        RequestOtp(USER, "bob@example.com", idempotency_key="k"),
        RequestOtp(USER, ALICE, purpose="step_up", idempotency_key="k"),
    ],
)
def test_an_idempotency_key_reused_with_other_parameters_is_rejected(cmd: RequestOtp) -> None:
    with pytest.raises(IdempotencyMismatch):
        when_requested([issued(1, T0, idempotency_key="k")], cmd, at=T0, n=2)


def test_the_right_code_verifies_the_challenge() -> None:
    decision = when_verified([issued(1, T0)], 1, right_code(1), at=T0 + timedelta(minutes=9))

    assert decision == Decision(
        (OtpChallengeVerified(cid(1), T0 + timedelta(minutes=9)),), (), VerifyOutcome(True, 5, False)
    )


def test_a_code_is_accepted_only_once_and_its_second_presentation_is_recorded() -> None:
    given = [issued(1, T0), OtpChallengeVerified(cid(1), T0)]
    decision = when_verified(given, 1, right_code(1), at=T0)
    assert decision.events == (OtpCodeRejected(cid(1), "used", T0),)
    assert decision.outcome == Rejected("used", "The code was already used.")


def test_a_wrong_code_is_recorded_as_a_failure() -> None:
    decision = when_verified([issued(1, T0)], 1, wrong_code(1), at=T0)

    assert decision == Decision(
        (OtpVerificationFailed(cid(1), attempt=1, consecutive_failures=1, failed_at=T0),),
        (),
        VerifyOutcome(verified=False, attempts_left=4, locked=False),
    )


def four_failures(n: int, *, consecutive_before: int = 0) -> list[object]:
    return [OtpVerificationFailed(cid(n), a, consecutive_before + a, T0) for a in range(1, 5)]


def test_the_fifth_wrong_code_locks_the_challenge() -> None:
    decision = when_verified([issued(1, T0), *four_failures(1)], 1, wrong_code(1), at=T0)

    assert decision.events == (
        OtpVerificationFailed(cid(1), 5, 5, T0),
        OtpChallengeLockedOut(cid(1), "challenge", T0, until=None),
    )
    assert decision.outcome == VerifyOutcome(verified=False, attempts_left=0, locked=True)


def test_a_locked_challenge_rejects_even_the_right_code_and_records_only_the_rejection() -> None:
    given = [issued(1, T0), *four_failures(1), OtpVerificationFailed(cid(1), 5, 5, T0),
             OtpChallengeLockedOut(cid(1), "challenge", T0, None)]  # fmt: skip
    decision = when_verified(given, 1, right_code(1), at=T0)
    assert decision.events == (OtpCodeRejected(cid(1), "locked", T0),)
    assert decision.outcome == Rejected("locked", "Too many wrong codes; request a new one.")


def test_an_unknown_challenge_rejects_any_code_and_writes_nothing() -> None:
    with pytest.raises(CodeRejected) as raised:
        when_verified([], 1, right_code(1), at=T0)
    assert raised.value.attempts_left == 0
    assert right_code(1) not in str(raised.value)


@pytest.mark.parametrize(
    ("given", "now", "reason"),
    [
        ([issued(1, T0)], T0 + timedelta(minutes=10), "expired"),
        ([issued(1, T0), OtpChallengeSuperseded(cid(1), cid(2)), issued(2, T0)], T0, "superseded"),
    ],
)
def test_an_expired_or_superseded_challenge_rejects_the_right_code_and_records_why(
    given: list[object], now: datetime, reason: str
) -> None:
    decision = when_verified(given, 1, right_code(1), at=now)
    assert decision.events == (OtpCodeRejected(cid(1), reason, now),)
    assert isinstance(decision.outcome, Rejected) and decision.outcome.reason == reason
    assert right_code(1) not in decision.outcome.message


def test_a_challenge_whose_nonce_reads_erased_accepts_no_code_and_is_answered_as_unknown() -> None:
    erased = attrs.evolve(issued(1, T0), nonce="[erased]")
    decision = when_verified([erased], 1, right_code(1), at=T0)
    assert decision.events == (OtpCodeRejected(cid(1), "erased", T0),)
    assert decision.outcome == Rejected("erased", "The code is not valid.")
    with pytest.raises(SecretUnavailable):
        otp_code_for(fold_otp([erased]).challenges[cid(1)], KEYS)


def test_a_challenge_issued_before_nonces_still_verifies_with_derivation_1() -> None:
    before = attrs.evolve(issued(1, T0), derivation=1, nonce=None)
    code = derive_otp_code(KEYS.current, cid(1), POLICY.digits)
    assert code != right_code(1), "derivation 2 differs from 1 for the same challenge and key"
    assert when_verified([before], 1, code, at=T0).outcome.verified


def test_rejected_presentations_past_the_bound_of_a_window_are_counted_not_written() -> None:
    given: list[object] = [issued(1, T0), OtpChallengeVerified(cid(1), T0)]
    written = 0
    for n in range(3 * REJECTIONS_PER_WINDOW):
        decision = decide_otp_verify(fold_otp(given), cid(1), right_code(1), now=T0 + timedelta(seconds=n),
                                     keys=KEYS, policy=POLICY, client="app")
        assert isinstance(decision.outcome, Rejected)
        if decision.events:
            written += 1
        else:
            assert decision.counted == Counted("otp", USER, "rejected", T0 + timedelta(seconds=n), "app")
        given += decision.events
    assert written == REJECTIONS_PER_WINDOW
    next_window = decide_otp_verify(fold_otp(given), cid(1), right_code(1), now=T0 + timedelta(hours=1),
                                    keys=KEYS, policy=POLICY)
    assert len(next_window.events) == 1, "a new window records again"


@pytest.mark.parametrize("code", ["12345", "1234567", "12345a", "", "१२३४५६"])
def test_a_code_of_the_wrong_shape_is_invalid_input_and_counts_nothing(code: str) -> None:
    with pytest.raises(InvalidInput, match="6 digits"):
        when_verified([issued(1, T0)], 1, code, at=T0)


def test_a_code_signed_before_a_key_rotation_still_verifies() -> None:
    state = fold_otp([issued(1, T0, key_id="k1")])
    code = otp_code_for(state.challenges[cid(1)], KEYS)

    assert code == right_code(1, key_id="k1")
    assert decide_otp_verify(state, cid(1), code, now=T0, keys=KEYS, policy=POLICY).outcome.verified


EIGHT_DIGITS = OtpPolicy(digits=8)


def test_a_challenge_keeps_its_length_when_the_policy_changes() -> None:
    state = fold_otp([issued(1, T0)])  # issued under the six-digit default
    code = otp_code_for(state.challenges[cid(1)], KEYS)

    assert code == right_code(1) and len(code) == 6
    assert decide_otp_verify(state, cid(1), code, now=T0, keys=KEYS, policy=EIGHT_DIGITS).outcome.verified


def test_a_new_challenge_records_the_length_of_the_policy_of_the_day() -> None:
    decision = decide_otp_request(
        fold_otp([]), RequestOtp(USER, ALICE), now=T0, challenge_id=cid(1), message_id=mid(1), nonce=nonce(1),
        keys=KEYS, policy=EIGHT_DIGITS,
    )  # fmt: skip

    [event] = decision.events
    assert isinstance(event, OtpChallengeIssued) and event.digits == 8
    assert len(otp_code_for(fold_otp(decision.events).challenges[cid(1)], KEYS)) == 8


def test_a_code_is_held_to_its_challenges_length_not_the_policys() -> None:
    with pytest.raises(InvalidInput, match="the code must be 6 digits"):
        decide_otp_verify(fold_otp([issued(1, T0)]), cid(1), "12345678", now=T0, keys=KEYS, policy=EIGHT_DIGITS)


def test_a_code_for_an_unknown_challenge_is_held_to_the_policys_length() -> None:
    with pytest.raises(InvalidInput, match="the code must be 8 digits"):
        decide_otp_verify(fold_otp([]), cid(1), "123456", now=T0, keys=KEYS, policy=EIGHT_DIGITS)


def on_the_brink_of_an_account_lock() -> list[object]:
    """99 consecutive failures so far, the last ones on challenge 1."""
    return [issued(1, T0), OtpVerificationFailed(cid(1), 1, 99, T0)]


def test_the_hundredth_consecutive_failure_locks_the_accounts_otp_flow() -> None:
    decision = when_verified(on_the_brink_of_an_account_lock(), 1, wrong_code(1), at=T0)

    assert decision.events == (
        OtpVerificationFailed(cid(1), 2, 100, T0),
        OtpChallengeLockedOut(cid(1), "account", T0, until=T0 + timedelta(minutes=15)),
    )
    assert decision.outcome == VerifyOutcome(verified=False, attempts_left=0, locked=True)


def test_a_locked_account_refuses_new_challenges_until_the_lock_ends() -> None:
    given = [*on_the_brink_of_an_account_lock(),
             OtpChallengeLockedOut(cid(1), "account", T0, T0 + timedelta(minutes=15))]  # fmt: skip
    with pytest.raises(LockedOut) as raised:
        when_requested(given, RequestOtp(USER, ALICE), at=T0 + timedelta(minutes=14), n=2)
    assert raised.value.retry_at == T0 + timedelta(minutes=15)

    after = when_requested(given, RequestOtp(USER, ALICE), at=T0 + timedelta(minutes=15), n=2)
    assert after.events[-1] == issued(2, T0 + timedelta(minutes=15))


def test_a_locked_account_answers_the_same_for_the_right_and_the_wrong_code_and_records_the_presentation() -> None:
    given = [*on_the_brink_of_an_account_lock(),
             OtpChallengeLockedOut(cid(1), "account", T0, T0 + timedelta(minutes=15))]  # fmt: skip
    at = T0 + timedelta(minutes=1)
    answers = [when_verified(given, 1, code, at=at) for code in (right_code(1), wrong_code(1))]

    assert answers[0] == answers[1]
    assert answers[0].events == (OtpCodeRejected(cid(1), "account_locked", at),)
    assert answers[0].outcome == Rejected(
        "account_locked", "Too many wrong codes: one-time codes for this account are locked until "
        f"{(T0 + timedelta(minutes=15)).isoformat()}.", retry_at=T0 + timedelta(minutes=15))


def test_an_unknown_challenge_while_the_account_is_locked_writes_nothing() -> None:
    given = [*on_the_brink_of_an_account_lock(),
             OtpChallengeLockedOut(cid(1), "account", T0, T0 + timedelta(minutes=15))]  # fmt: skip
    with pytest.raises(LockedOut):
        when_verified(given, 9, "123456", at=T0 + timedelta(minutes=1))


def test_a_new_challenge_does_not_reset_the_consecutive_failures() -> None:
    given = [issued(1, T0), *four_failures(1, consecutive_before=90), OtpChallengeSuperseded(cid(1), cid(2)),
             issued(2, T0 + timedelta(minutes=2))]  # fmt: skip
    decision = when_verified(given, 2, wrong_code(2), at=T0 + timedelta(minutes=3))

    assert decision.events == (OtpVerificationFailed(cid(2), 1, 95, T0 + timedelta(minutes=3)),)


def test_a_right_code_resets_the_consecutive_failures() -> None:
    given = [issued(1, T0), *four_failures(1, consecutive_before=90), OtpChallengeVerified(cid(1), T0),
             issued(2, T0 + timedelta(minutes=2))]  # fmt: skip
    decision = when_verified(given, 2, wrong_code(2), at=T0 + timedelta(minutes=3))

    assert decision.events[0].consecutive_failures == 1


def test_each_account_lockout_lasts_twice_as_long_as_the_last_up_to_the_cap() -> None:
    lockouts = [POLICY.account_lock_backoff(k) for k in range(1, 9)]
    assert lockouts == [timedelta(minutes=15 * 2**i) for i in range(7)] + [timedelta(hours=24)]
    assert POLICY.account_lock_backoff(10**6) == timedelta(hours=24)


def test_the_second_account_lockout_lasts_thirty_minutes() -> None:
    now = T0 + timedelta(minutes=21)
    given = [issued(1, T0), OtpChallengeLockedOut(cid(1), "account", T0, T0 + timedelta(minutes=15)),
             OtpVerificationFailed(cid(1), 1, 199, T0 + timedelta(minutes=20)),
             OtpChallengeSuperseded(cid(1), cid(2)), issued(2, now)]  # fmt: skip
    decision = when_verified(given, 2, wrong_code(2), at=now)

    until = now + timedelta(minutes=30)
    assert decision.events[-1] == OtpChallengeLockedOut(cid(2), "account", now, until=until)


def test_an_idempotent_replay_is_answered_even_while_the_account_is_locked() -> None:
    lock = OtpChallengeLockedOut(cid(1), "account", T0, T0 + timedelta(hours=1))
    given = [issued(1, T0, idempotency_key="k"), lock]
    cmd = RequestOtp(USER, ALICE, idempotency_key="k")
    decision = when_requested(given, cmd, at=T0 + timedelta(minutes=1), n=2)

    assert decision.events == () and decision.outcome.replayed


@pytest.mark.parametrize(
    ("given", "now", "verdict"),
    [
        ([issued(1, T0)], T0, None),
        ([], T0, "unknown_request"),
        ([issued(1, T0), OtpChallengeSuperseded(cid(1), cid(2))], T0, "superseded"),
        ([issued(1, T0)], T0 + timedelta(minutes=10), "expired"),
        ([issued(1, T0), OtpChallengeVerified(cid(1), T0)], T0, "verified"),
        ([issued(1, T0), OtpChallengeLockedOut(cid(1), "challenge", T0, None)], T0, "locked"),
        ([issued(1, T0), OtpChallengeLockedOut(cid(1), "account", T0, T0 + timedelta(minutes=15))],
         T0, "locked"),
    ],
)
def test_the_worker_sends_a_code_only_while_it_can_still_be_used(
    given: list[object], now: datetime, verdict: str | None
) -> None:
    assert otp_delivery_verdict(fold_otp(given), cid(1), now=now) == verdict


def test_an_event_of_another_stream_cannot_be_folded_into_otp_state() -> None:
    with pytest.raises(UnknownEventType):
        fold_otp([EmailQueued(mid(1), "otp", "otp_code", USER, cid(1), ALICE, T0)])


def test_the_default_otp_policy_matches_the_design() -> None:
    assert (POLICY.ttl, POLICY.cooldown, POLICY.hourly_limit, POLICY.max_attempts, POLICY.digits) == (
        timedelta(minutes=10), timedelta(seconds=60), 5, 5, 6,
    )  # fmt: skip
    assert (POLICY.account_lock_threshold, POLICY.account_lock_base, POLICY.account_lock_max) == (
        100, timedelta(minutes=15), timedelta(hours=24),
    )  # fmt: skip


@pytest.mark.parametrize(
    "overrides",
    [{"digits": 3}, {"digits": 11}, {"max_attempts": 0}, {"ttl": timedelta(0)}, {"account_lock_threshold": 0},
     {"account_lock_base": timedelta(hours=2), "account_lock_max": timedelta(hours=1)},
     {"digits": 4}, {"digits": 5}, {"account_lock_threshold": 101}],
)  # fmt: skip
def test_an_otp_policy_that_cannot_be_honoured_is_refused(overrides: dict) -> None:
    with pytest.raises(ConfigError):
        OtpPolicy(**overrides)


def test_new_codes_of_six_to_ten_digits_are_allowed() -> None:
    assert [OtpPolicy(digits=d).digits for d in (6, 10)] == [6, 10]


def test_new_codes_below_six_digits_are_refused_by_the_nist_floor() -> None:
    with pytest.raises(ConfigError, match="between 6 and 10 for new codes"):
        OtpPolicy(digits=5)


def test_an_account_lock_above_a_hundred_failures_is_refused_and_a_hundred_is_allowed() -> None:
    assert OtpPolicy(account_lock_threshold=100).account_lock_threshold == 100
    with pytest.raises(ConfigError, match="account_lock_threshold must be at most 100"):
        OtpPolicy(account_lock_threshold=101)
