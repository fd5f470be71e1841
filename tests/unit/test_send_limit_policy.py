"""The limits beyond the user, as a pure policy: which counters a call takes, and what a full one answers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from domain.client_ips import limit_subject
from domain.errors import ConfigError, InvalidInput
from domain.send_limits import WINDOW, Counter, SendLimits, first_full, send_counters, verify_counters

NOW = datetime(2026, 3, 1, 10, 17, 5, tzinfo=UTC)
LIMITS = SendLimits()


def counters(ip_hash: str | None = "k:ip", hourly_limit: int = 5) -> tuple[Counter, ...]:
    return send_counters(LIMITS, flow="otp", hourly_limit=hourly_limit, tenant="acme", scoped_user_id="acme u1",
                         address_hash="k:addr", ip_hash=ip_hash)


def test_without_an_ip_an_email_takes_only_the_address_counter() -> None:
    [only] = counters(ip_hash=None)
    assert only.quota.name == "per-address" and only.quota.count == 6
    assert only.key == "address acme k:addr", "the tenant and the address's keyed hash, nothing else"


def test_with_an_ip_the_ips_own_counters_come_before_the_address() -> None:
    assert [c.quota.name for c in counters()] == ["per-user-ip", "per-address-ip", "per-ip", "per-address"]
    assert all("k:ip" in c.key for c in counters()[:3])


def test_every_sub_allowance_is_smaller_than_the_whole_it_is_part_of() -> None:
    by_name = {c.quota.name: c.quota.count for c in counters(hourly_limit=5)}
    assert by_name["per-user-ip"] < 5
    assert by_name["per-address-ip"] < by_name["per-address"]


def test_a_lowered_hourly_limit_holds_the_ips_part_one_below_it() -> None:
    assert LIMITS.user_ip_quota(3).count == 2
    assert LIMITS.user_ip_quota(2).count == 1
    assert LIMITS.user_ip_quota(1).count == 1, "nothing left to split: documented as a residual risk"
    assert LIMITS.user_ip_quota(50).count == 3


def test_counters_with_room_allow_the_call() -> None:
    assert first_full([(c, c.quota.count - 1) for c in counters()], now=NOW) is None


def test_a_full_counter_refuses_until_its_window_ends() -> None:
    counts = [(c, c.quota.count if c.quota.name == "per-address" else 0) for c in counters()]
    refused = first_full(counts, now=NOW)
    assert refused is not None
    assert refused.quota.name == "per-address"
    assert refused.retry_at == datetime(2026, 3, 1, 11, 0, tzinfo=UTC)
    assert refused.quota.window == WINDOW == timedelta(hours=1)


def test_when_several_are_full_the_callers_own_ip_counter_is_named() -> None:
    refused = first_full([(c, c.quota.count) for c in counters()], now=NOW)
    assert refused is not None and refused.quota.name == "per-user-ip"


def test_a_verify_takes_a_counter_only_with_an_ip() -> None:
    assert verify_counters(LIMITS, tenant="acme", ip_hash=None) == ()
    [check] = verify_counters(LIMITS, tenant="acme", ip_hash="k:ip")
    assert check.quota.name == "verify-ip" and check.quota.count == 60


def test_an_ips_part_as_large_as_the_address_allowance_is_refused_as_configuration() -> None:
    with pytest.raises(ConfigError, match="smaller than per_address"):
        SendLimits(per_address=3, per_address_per_ip=3)
    with pytest.raises(ConfigError):
        SendLimits(per_ip=0)


@pytest.mark.parametrize(("given", "counted"), [
    ("203.0.113.7", "203.0.113.7"),
    ("::ffff:203.0.113.7", "203.0.113.7"),
    ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
    ("2001:db8:1:2:bbbb:cccc:dddd:eeee", "2001:db8:1:2::/64"),
])
def test_an_ip_counts_as_its_ipv4_address_or_its_ipv6_64(given: str, counted: str) -> None:
    assert limit_subject(given) == counted


@pytest.mark.parametrize("given", [
    "", "localhost", "203.0.113.7:80", "203.0.113.0/24", "fe80::1%eth0", "1.2.3", "01.2.3.4", " 1.2.3.4", 7, None,
])
def test_anything_but_one_ip_address_is_invalid_input_that_does_not_repeat_it(given: object) -> None:
    with pytest.raises(InvalidInput) as refused:
        limit_subject(given)
    assert "client_ip must be" in str(refused.value)
    assert not (isinstance(given, str) and given.strip() and given.strip() in str(refused.value))
