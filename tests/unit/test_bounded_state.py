"""What a decision reads of a user's state is bounded, whatever their history (issue 13): the pure parts.

The whole fold remembers every request (a used link is told so for good);
a snapshot keeps its live part (``projections.snapshots.live_part``): the
open requests and when those of the last ``LIVE_FOR`` were made, with the
OTP account-lock counters. Older requests are looked up by key. Floods are counted, not
written: see the counting rules.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest

from domain.counting import (
    FLOOD_EVENTS_PER_WINDOW,
    CountingRun,
    FloodTally,
    RequestsCounted,
    count_floods,
    counts_fit,
    flood_after,
)
from domain.decisions import Decision, Refused
from domain.request_rules import KEPT_FOR
from domain.errors import ConfigError, TokenInvalid
from domain.otp import RequestOtp, decide_otp_request
from domain.otp_events import OtpChallengeLockedOut, OtpVerificationFailed
from domain.otp_state import fold_otp
from domain.policy import OtpPolicy, ResetPolicy
from domain.reset import RequestReset, check_token, decide_reset_request
from domain.reset_events import ResetRequestRefused
from domain.reset_state import fold_reset
from domain.tokens import derive_reset_token, hash_token
from projections.snapshots import LIVE_FOR, live_part
from tests.support.keys import TEST_KEYS
from tests.support.secrets import nonce

T0 = datetime(2025, 3, 1, 0, 0, tzinfo=UTC)
KEYS = TEST_KEYS
POLICY = ResetPolicy()


def requested_for_days(days: int) -> tuple[list[object], list[UUID]]:
    """The events of a user asking for a link as often as the limit allows, every hour for ``days``."""
    events: list[object] = []
    ids: list[UUID] = []
    state = fold_reset([])
    for hour in range(days * 24):
        for n in range(POLICY.hourly_limit):
            now = T0 + timedelta(hours=hour, minutes=2 * n)
            request_id = UUID(int=len(ids) + 1)
            decision = decide_reset_request(state, RequestReset("42", "ada@example.test"), now=now,
                                            request_id=request_id, message_id=UUID(int=10**9 + len(ids)),
                                            nonce=nonce(request_id.int), keys=KEYS, policy=POLICY)
            ids.append(request_id)
            events += decision.events
            state = fold_reset(decision.events, state)
    return events, ids


def test_ten_days_of_requests_at_the_limit_leave_the_open_one_and_two_hours_of_times_in_the_live_part() -> None:
    events, ids = requested_for_days(10)
    whole = fold_reset(events)
    live = live_part(whole)
    assert len(ids) == 10 * 24 * POLICY.hourly_limit
    assert list(live.requests) == [ids[-1]] and list(live.by_token_hash.values()) == [ids[-1]]
    assert live.receipts == {}
    assert POLICY.hourly_limit <= len(live.request_times) <= (LIVE_FOR // timedelta(hours=1) + 1) * POLICY.hourly_limit
    assert live.request_times == whole.request_times[-len(live.request_times):]


def test_the_live_part_refuses_the_next_request_of_a_full_hour_as_the_whole_fold_does() -> None:
    events, _ = requested_for_days(1)
    whole = fold_reset(events)
    now = whole.request_times[-1] + timedelta(minutes=1)
    decided = [decide_reset_request(state, RequestReset("42", "eve@example.test"), now=now, request_id=UUID(int=7),
                                    message_id=UUID(int=8), nonce=nonce(7), keys=KEYS, policy=POLICY)
               for state in (whole, live_part(whole))]
    assert isinstance(decided[0].outcome, Refused) and decided[0] == decided[1]


def test_a_link_ten_days_old_is_refused_as_replaced_and_so_is_a_recent_closed_one() -> None:
    events, ids = requested_for_days(10)
    state = fold_reset(events)
    now = T0 + timedelta(days=10)
    for request_id in (ids[0], ids[-2]):
        with pytest.raises(TokenInvalid, match="replaced"):
            check_token(state, hash_token(derive_reset_token(KEYS.current, request_id, nonce(request_id.int))), now=now)


def test_the_account_lock_counters_stay_in_the_live_part() -> None:
    failed = [OtpVerificationFailed(UUID(int=1), 1, 7, T0), OtpChallengeLockedOut(None, "account", T0, T0)]
    state = fold_otp(failed)
    policy = OtpPolicy()
    later = T0 + 3 * KEPT_FOR
    decision = decide_otp_request(state, RequestOtp("42", "ada@example.test"), now=later, challenge_id=UUID(int=2),
                                  message_id=UUID(int=3), nonce=nonce(2), keys=KEYS, policy=policy)
    state = live_part(fold_otp(decision.events, state))
    assert (state.consecutive_failures, state.account_lockouts) == (7, 1)


def test_a_refusal_after_the_first_of_its_window_is_counted_not_written() -> None:
    state = fold_reset([])
    for n in range(POLICY.hourly_limit):
        now = T0 + timedelta(minutes=30 + 2 * n)
        decision = decide_reset_request(state, RequestReset("42", "ada@example.test"), now=now,
                                        request_id=UUID(int=n + 1), message_id=UUID(int=100 + n), nonce=nonce(n + 1),
                                        keys=KEYS, policy=POLICY)
        state = fold_reset(decision.events, state)
    now = T0 + timedelta(minutes=50)
    first = decide_reset_request(state, RequestReset("42", "ada@example.test"), now=now, request_id=UUID(int=50),
                                 message_id=UUID(int=51), nonce=nonce(50), keys=KEYS, policy=POLICY)
    assert isinstance(first.outcome, Refused) and len(first.events) == 1 and first.counted is None
    state = fold_reset(first.events, state)
    second = decide_reset_request(state, RequestReset("42", "ada@example.test", client="app"), now=now,
                                  request_id=UUID(int=52), message_id=UUID(int=53), nonce=nonce(52), keys=KEYS,
                                  policy=POLICY)
    assert second.outcome == first.outcome and second.events == ()
    assert second.counted is not None and (second.counted.answer, second.counted.client) == ("refused", "app")
    next_window = decide_reset_request(state, RequestReset("42", "ada@example.test"), now=T0 + timedelta(minutes=65),
                                       request_id=UUID(int=54), message_id=UUID(int=55), nonce=nonce(54), keys=KEYS,
                                       policy=POLICY)
    assert isinstance(next_window.outcome, Refused) and len(next_window.events) == 1, "a new window logs again"


def test_a_receipt_lives_at_most_two_days() -> None:
    with pytest.raises(ConfigError, match="receipt_ttl"):
        ResetPolicy(receipt_ttl=KEPT_FOR + timedelta(seconds=1))
    with pytest.raises(ConfigError, match="receipt_ttl"):
        OtpPolicy(receipt_ttl=KEPT_FOR + timedelta(days=1))


def flood_of(events: int, at: datetime) -> list[object]:
    """``events`` refusals of one window, as a caller who varies each call would have them written."""
    return [ResetRequestRefused("42", "rate_limited", at, at + timedelta(hours=1)) for _ in range(events)]


def test_past_the_ceiling_a_refusal_is_counted_whatever_its_address_and_a_new_window_writes_again() -> None:
    state = fold_reset(flood_of(FLOOD_EVENTS_PER_WINDOW, T0 + timedelta(minutes=5)))
    assert state.flood == FloodTally(T0, FLOOD_EVENTS_PER_WINDOW)
    refused = Decision((ResetRequestRefused("42", "rate_limited", T0, T0),), (), Refused("rate_limited", T0))
    # A new run (the last one was a binding), which alone would be written: the ceiling counts it.
    bound_run = CountingRun("reused", T0, 1)
    counted = count_floods(refused, bound_run, state.flood, flow="reset", user_id="42", client="app",
                           now=T0 + timedelta(minutes=59))
    assert counted.events == () and counted.counted is not None and counted.counted.answer == "refused"
    written = count_floods(refused, bound_run, state.flood, flow="reset", user_id="42", client="app",
                           now=T0 + timedelta(minutes=60))
    assert written == refused, "the ceiling is per hour of the clock"


def test_a_count_of_a_closed_window_written_late_leaves_the_new_windows_tally_alone() -> None:
    tally = FloodTally(T0 + timedelta(hours=1), 3)
    late = RequestsCounted("reset", "42", "refused", T0, T0, T0 + timedelta(minutes=59), 400, ("app",))
    assert flood_after(tally, late) == tally
    assert flood_after(FloodTally(T0, 30), late) == FloodTally(T0, 31)


def test_counts_wait_for_the_hour_to_close_once_writing_them_would_pass_the_ceiling() -> None:
    now = T0 + timedelta(minutes=40)
    counts = [RequestsCounted("reset", "42", answer, T0, now, now, 9, (None,)) for answer in ("refused", "reused")]
    assert counts_fit(FloodTally(T0, FLOOD_EVENTS_PER_WINDOW - 2), counts, [], now=now)
    assert not counts_fit(FloodTally(T0, FLOOD_EVENTS_PER_WINDOW - 1), counts, [], now=now)
    assert counts_fit(FloodTally(T0, FLOOD_EVENTS_PER_WINDOW), counts, [], now=now + timedelta(hours=1)), \
        "the next window's first append writes the last window's counts"
