"""The token bucket's rules, with given times: examples, then properties over random request times."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.buckets import Bucket, Rate, full, is_full, take
from domain.errors import ConfigError
from domain.fairness import FairnessPolicy, turns_of

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RATE = Rate("per-key", 2, 5)


def after(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def take_all(rate: Rate, times: list[datetime]) -> list[bool]:
    bucket: Bucket | None = None
    allowed = []
    for now in times:
        taken = take(bucket, rate, now)
        bucket, _ = taken.bucket, allowed.append(taken.allowed)
    return allowed


def test_a_first_burst_is_allowed_whole_and_the_next_request_refused_until_a_token_is_back() -> None:
    assert take_all(RATE, [T0] * 6) == [True] * 5 + [False]
    bucket = full(RATE, T0)
    for _ in range(5):
        bucket = take(bucket, RATE, T0).bucket
    refused = take(bucket, RATE, T0)
    assert not refused.allowed and refused.remaining == 0
    assert refused.retry_at == after(0.5)  # 2 a second: a token every half second
    assert take(refused.bucket, RATE, refused.retry_at).allowed


def test_a_clock_that_goes_back_mints_no_tokens_and_takes_none_back() -> None:
    bucket = take(take(None, Rate("per-key", 1, 2), T0).bucket, Rate("per-key", 1, 2), T0).bucket
    assert bucket.tokens == 0
    earlier = take(bucket, Rate("per-key", 1, 2), T0 - timedelta(hours=1))
    assert not earlier.allowed and earlier.bucket.counted_at == T0


def test_a_bucket_is_full_again_once_the_burst_has_had_time_to_refill() -> None:
    bucket = take(None, RATE, T0).bucket
    assert not is_full(bucket, RATE, after(0.49))
    assert is_full(bucket, RATE, after(0.5))


def test_a_rate_states_its_burst_and_the_time_it_takes_to_fill_as_its_quota() -> None:
    quota = Rate("per-tenant", 100, 200).quota
    assert (quota.name, quota.count, quota.window_seconds) == ("per-tenant", 200, 2)
    assert Rate("per-key", 50, 10).quota.window_seconds == 1  # never under a second


@pytest.mark.parametrize("per_second, burst", [(0, 1), (-1, 1), (math.inf, 1), (math.nan, 1), (1, 0), (1, True)])
def test_a_rate_that_cannot_be_honoured_is_refused(per_second: float, burst: int) -> None:
    with pytest.raises(ConfigError):
        Rate("per-key", per_second, burst)


def test_a_fairness_policy_refuses_a_cap_below_one_and_a_negative_wait() -> None:
    with pytest.raises(ConfigError):
        FairnessPolicy(tenant_in_flight=0)
    with pytest.raises(ConfigError):
        FairnessPolicy(in_flight_wait=timedelta(seconds=-1))
    with pytest.raises(ConfigError):
        FairnessPolicy(key_burst=0)


def test_a_tenant_runs_all_its_turns_alone_and_its_shared_turns_beside_another() -> None:
    policy = FairnessPolicy(tenant_in_flight=3, shared_in_flight=1)
    assert turns_of(policy, others_active=False) == 3
    assert turns_of(policy, others_active=True) == 1


@pytest.mark.parametrize("shared", [0, 3, True])
def test_shared_turns_are_at_least_one_and_never_more_than_a_tenant_alone_has(shared: int) -> None:
    with pytest.raises(ConfigError):
        FairnessPolicy(tenant_in_flight=2, shared_in_flight=shared)


rates = st.builds(lambda per_second, burst: Rate("per-key", per_second, burst),
                  st.integers(1, 50), st.integers(1, 20))
# Request times as gaps in milliseconds, so that sums are exact.
gaps = st.lists(st.integers(0, 2_000), min_size=1, max_size=200)


def times_of(gap_ms: list[int]) -> list[datetime]:
    times, now = [], T0
    for gap in gap_ms:
        now += timedelta(milliseconds=gap)
        times.append(now)
    return times


@given(rates, gaps)
def test_no_window_allows_more_than_the_burst_plus_what_the_rate_refills_in_it(rate: Rate, gap_ms: list[int]) -> None:
    times = times_of(gap_ms)
    allowed = [now for now, ok in zip(times, take_all(rate, times), strict=True) if ok]
    for i, start in enumerate(allowed):
        for j in range(i, len(allowed)):
            span = (allowed[j] - start).total_seconds()
            assert j - i + 1 <= rate.burst + span * rate.per_second + 1e-9


@given(rates, gaps)
def test_a_request_is_refused_only_when_less_than_one_token_is_left(rate: Rate, gap_ms: list[int]) -> None:
    bucket: Bucket | None = None
    for now in times_of(gap_ms):
        taken = take(bucket, rate, now)
        assert 0 <= taken.bucket.tokens <= rate.burst
        if not taken.allowed:
            assert taken.bucket.tokens < 1
            assert taken.retry_at > now
            assert take(taken.bucket, rate, taken.retry_at).allowed  # the token is there when it said
        bucket = taken.bucket


@given(rates, st.integers(0, 200))
def test_requests_spaced_at_the_rate_are_never_refused(rate: Rate, count: int) -> None:
    spacing = timedelta(microseconds=math.ceil(1_000_000 / rate.per_second))
    assert all(take_all(rate, [T0 + n * spacing for n in range(count)]))
