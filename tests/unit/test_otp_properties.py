"""Properties of the OTP rules over random sequences of requests, right and
wrong codes, and the passing of time.

A small independent model (the newest challenge, which were accepted, the
failure count) checks the domain, rather than the domain checking itself.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

import attrs
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from domain.decisions import Decision, Rejected, RequestOutcome
from domain.errors import CodeRejected, IdempotencyMismatch, LockedOut
from domain.otp import RequestOtp, decide_otp_request, decide_otp_verify
from domain.otp_state import OtpState, account_locked_until, evolve_otp, fold_otp
from domain.policy import OtpPolicy
from domain.tokens import derive_otp_code
from tests.support.keys import TEST_KEYS
from tests.support.secrets import nonce

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
KEYS = TEST_KEYS
# Small limits, so that a few dozen steps reach every lock and limit.
POLICY = OtpPolicy(
    ttl=timedelta(minutes=10), cooldown=timedelta(seconds=60), hourly_limit=5, max_attempts=3,
    account_lock_threshold=4, account_lock_base=timedelta(minutes=2),
    account_lock_max=timedelta(minutes=8),
)  # fmt: skip
USER = "7"


class OtpFlow(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.events: list[object] = []
        self.state: OtpState = fold_otp([])
        self.next_id = 1
        # The independent model.
        self.issued: list[UUID] = []
        self.expires: dict[UUID, datetime] = {}
        self.accepted: set[UUID] = set()
        self.failures: dict[UUID, int] = {}
        self.consecutive = 0
        self.previous_consecutive = 0
        self.succeeded_last_step = False

    def _apply(self, decision: Decision) -> None:
        codes = [derive_otp_code(KEYS.current, c, POLICY.digits, nonce(c.int)) for c in self.issued]
        for happened in decision.events:
            values = attrs.astuple(happened, recurse=False)
            assert not any(isinstance(v, str) and v in codes for v in values), "a code was written"
            self.state = evolve_otp(self.state, happened)
            self.events.append(happened)

    def _fresh_id(self) -> UUID:
        self.next_id += 1
        return UUID(int=self.next_id)

    @rule(
        recipient=st.sampled_from(["a@example.com", "b@example.com"]),
        purpose=st.sampled_from(["login", "step_up"]),
        idempotency_key=st.sampled_from([None, None, None, "k1", "k2"]),
    )
    def request(self, recipient: str, purpose: str, idempotency_key: str | None) -> None:
        self.succeeded_last_step = False
        challenge_id, message_id = self._fresh_id(), self._fresh_id()
        cmd = RequestOtp(USER, recipient, purpose, idempotency_key)
        try:
            decision = decide_otp_request(
                self.state, cmd, now=self.now, challenge_id=challenge_id, message_id=message_id,
                nonce=nonce(challenge_id.int), keys=KEYS, policy=POLICY,
            )  # fmt: skip
        except (LockedOut, IdempotencyMismatch) as error:
            event(f"request: {type(error).__name__}")
            return
        self._apply(decision)
        event(f"request: {type(decision.outcome).__name__}")
        if isinstance(decision.outcome, RequestOutcome) and not (decision.outcome.reused or decision.outcome.replayed):
            self.issued.append(challenge_id)
            self.expires[challenge_id] = self.now + POLICY.ttl

    # Wrong codes and the newest challenge weigh more: they reach the locks.
    @rule(
        which=st.sampled_from(["newest", "newest", "newest", "older", "unknown"]),
        right=st.sampled_from([False, True, False, False]),
    )
    def verify(self, which: str, right: bool) -> None:
        self.succeeded_last_step = False
        if which == "unknown" or not self.issued:
            challenge_id = UUID(int=10**9)
        elif which == "older":
            challenge_id = self.issued[0]
        else:
            challenge_id = self.issued[-1]
        code = derive_otp_code(KEYS.current, challenge_id, POLICY.digits, nonce(challenge_id.int))
        if not right:
            code = str((int(code) + 1) % 10**POLICY.digits).zfill(POLICY.digits)
        try:
            decision = decide_otp_verify(
                self.state, challenge_id, code, now=self.now, keys=KEYS, policy=POLICY
            )
        except (CodeRejected, LockedOut) as error:
            event(f"verify: {type(error).__name__}")
            return
        if isinstance(decision.outcome, Rejected):
            event(f"verify: rejected ({decision.outcome.reason})")
            usable = (challenge_id == self.issued[-1] and self.now < self.expires[challenge_id]
                      and challenge_id not in self.accepted
                      and self.failures.get(challenge_id, 0) < POLICY.max_attempts)
            if decision.outcome.reason == "account_locked":
                assert account_locked_until(self.state, now=self.now) is not None, "refused as locked while unlocked"
            else:
                assert not usable, "refused a code of a usable challenge unchecked"
            self._apply(decision)
            return
        event(f"verify: verified={decision.outcome.verified} locked={decision.outcome.locked}")
        assert decision.outcome.verified == right
        if right:
            assert challenge_id == self.issued[-1], "accepted a superseded challenge's code"
            assert self.now < self.expires[challenge_id], "accepted an expired code"
            assert challenge_id not in self.accepted, "accepted a code twice"
            assert self.failures.get(challenge_id, 0) < POLICY.max_attempts
            self.accepted.add(challenge_id)
            self.consecutive = 0
            self.succeeded_last_step = True
        else:
            self.failures[challenge_id] = self.failures.get(challenge_id, 0) + 1
            self.consecutive += 1
        self._apply(decision)

    @rule()
    def guess_wrong_on_the_newest(self) -> None:
        # Runs of wrong guesses are what reach the challenge and account locks.
        self.verify("newest", right=False)

    @rule(seconds=st.sampled_from([1, 30, 61, 120, 600, 3600]))
    def advance_time(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    @invariant()
    def at_most_one_challenge_is_open(self) -> None:
        open_ids = [c for c, ch in self.state.challenges.items() if ch.status == "open"]
        assert len(open_ids) <= 1
        assert not open_ids or open_ids == self.issued[-1:]

    @invariant()
    def consecutive_failures_never_drop_without_a_success(self) -> None:
        current = self.state.consecutive_failures
        assert current == self.consecutive
        assert current >= self.previous_consecutive or self.succeeded_last_step
        self.previous_consecutive = current

    @invariant()
    def replaying_the_log_gives_the_same_state(self) -> None:
        assert fold_otp(self.events) == self.state


OtpFlow.TestCase.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)
test_the_otp_rules_hold_over_any_sequence_of_requests_codes_and_time = OtpFlow.TestCase
