"""The configurable rules of both request flows, checked when built.

A policy that cannot be honoured is refused with ``ConfigError`` at start-up
rather than discovered later on a user's request.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, TypeVar

from attrs import evolve, frozen

from domain.request_rules import KEPT_FOR
from domain.errors import ConfigError, InvalidInput
from domain.send_limits import SendLimits
from domain.tokens import MAX_OTP_DIGITS

# A reset link is a bearer credential for the account: however the operator
# configures it, it must not outlive a day.
RESET_TTL_HARD_CAP = timedelta(hours=24)

# Standards floors for new configuration (NIST SP 800-63B, 5.1.3 and 5.2.2):
# new codes carry at least 6 digits, and an account locks after at most 100
# consecutive failed attempts. Derivation still takes the shorter codes of
# challenges issued before (domain.tokens.MIN_OTP_DIGITS): each keeps its own.
OTP_DIGITS_FLOOR = 6
ACCOUNT_LOCK_CEILING = 100


def _positive_duration(owner: str, name: str, value: object) -> None:
    if not isinstance(value, timedelta):
        raise ConfigError(f"{owner}.{name} must be a duration, got {value!r}")
    if value <= timedelta(0):
        raise ConfigError(f"{owner}.{name} must be positive, got {value}")


def _non_negative_duration(owner: str, name: str, value: object) -> None:
    # A zero cooldown is a legitimate choice: every request supersedes.
    if not isinstance(value, timedelta):
        raise ConfigError(f"{owner}.{name} must be a duration, got {value!r}")
    if value < timedelta(0):
        raise ConfigError(f"{owner}.{name} must not be negative, got {value}")


def _within_kept_for(owner: str, value: timedelta) -> None:
    # A retry days later is a new request: receipts are bounded (KEPT_FOR).
    if value > KEPT_FOR:
        raise ConfigError(
            f"{owner}.receipt_ttl must be at most {KEPT_FOR} (how long a receipt may live), got {value}"
        )


def _cooldown_within_receipt(owner: str, cooldown: timedelta, receipt_ttl: timedelta) -> None:
    # A key is bound only to a request another call made while its receipt lives (domain.request_rules.first_answer):
    # a request outliving, as reusable, the receipt of the key that made it would be rebound to that same key.
    if cooldown >= receipt_ttl:
        raise ConfigError(f"{owner}.cooldown must be shorter than receipt_ttl ({receipt_ttl}), got {cooldown}")


def _positive_int(owner: str, name: str, value: object) -> None:
    # bool is an int subclass; True as a limit is a configuration mistake.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{owner}.{name} must be an integer, got {value!r}")
    if value < 1:
        raise ConfigError(f"{owner}.{name} must be at least 1, got {value}")


@frozen
class ResetPolicy:
    """Rules of the password-reset flow."""

    ttl: timedelta = timedelta(minutes=30)
    cooldown: timedelta = timedelta(seconds=60)
    hourly_limit: int = 5
    receipt_ttl: timedelta = timedelta(hours=24)

    def __attrs_post_init__(self) -> None:
        for name in ("ttl", "receipt_ttl"):
            _positive_duration("ResetPolicy", name, getattr(self, name))
        _non_negative_duration("ResetPolicy", "cooldown", self.cooldown)
        _within_kept_for("ResetPolicy", self.receipt_ttl)
        _cooldown_within_receipt("ResetPolicy", self.cooldown, self.receipt_ttl)
        _positive_int("ResetPolicy", "hourly_limit", self.hourly_limit)
        if self.ttl > RESET_TTL_HARD_CAP:
            raise ConfigError(
                f"ResetPolicy.ttl must be at most {RESET_TTL_HARD_CAP} (a hard cap), "
                f"got {self.ttl}"
            )


@frozen
class OtpPolicy:
    """Rules of the email one-time-code flow."""

    ttl: timedelta = timedelta(minutes=10)
    cooldown: timedelta = timedelta(seconds=60)
    hourly_limit: int = 5
    # Wrong codes that lock one challenge.
    max_attempts: int = 5
    # Length of the codes of new challenges (OTP_DIGITS_FLOOR up); each challenge keeps its own.
    digits: int = 6
    # Consecutive wrong codes, across challenges, that lock the whole flow.
    account_lock_threshold: int = 100
    account_lock_base: timedelta = timedelta(minutes=15)
    account_lock_max: timedelta = timedelta(hours=24)
    receipt_ttl: timedelta = timedelta(hours=24)

    def __attrs_post_init__(self) -> None:
        for name in ("ttl", "account_lock_base", "account_lock_max", "receipt_ttl"):
            _positive_duration("OtpPolicy", name, getattr(self, name))
        _non_negative_duration("OtpPolicy", "cooldown", self.cooldown)
        _within_kept_for("OtpPolicy", self.receipt_ttl)
        _cooldown_within_receipt("OtpPolicy", self.cooldown, self.receipt_ttl)
        for name in ("hourly_limit", "max_attempts", "account_lock_threshold"):
            _positive_int("OtpPolicy", name, getattr(self, name))
        _positive_int("OtpPolicy", "digits", self.digits)
        if not OTP_DIGITS_FLOOR <= self.digits <= MAX_OTP_DIGITS:
            raise ConfigError(
                f"OtpPolicy.digits must be between {OTP_DIGITS_FLOOR} and {MAX_OTP_DIGITS} for new codes "
                f"(NIST SP 800-63B), got {self.digits}"
            )
        if self.account_lock_threshold > ACCOUNT_LOCK_CEILING:
            raise ConfigError(
                f"OtpPolicy.account_lock_threshold must be at most {ACCOUNT_LOCK_CEILING} (NIST SP 800-63B), "
                f"got {self.account_lock_threshold}"
            )
        if self.account_lock_max < self.account_lock_base:
            raise ConfigError(
                "OtpPolicy.account_lock_max must not be shorter than account_lock_base, "
                f"got {self.account_lock_max} < {self.account_lock_base}"
            )

    def account_lock_backoff(self, lockout_number: int) -> timedelta:
        """How long the ``lockout_number``-th account lockout (1-based) lasts:
        the base doubled each time, capped at ``account_lock_max``."""
        backoff = self.account_lock_base
        # Double step by step instead of computing 2**(k-1): k grows without
        # bound over an account's life and a huge power overflows timedelta.
        for _ in range(lockout_number - 1):
            if backoff >= self.account_lock_max:
                break
            backoff *= 2
        return min(backoff, self.account_lock_max)


# -- what a tenant may set of these rules --------------------------------------------------------------


@frozen
class Bounds:
    """The whole numbers a setting accepts, and the standard behind an end when one is: the one check of a
    deployment's setting (``infra.config.values.whole``) and of a tenant's override of it alike."""

    low: int
    high: int
    low_because: str = ""
    high_because: str = ""

    def problem(self, value: object) -> str | None:
        """Why ``value`` is not accepted, or None."""
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be a whole number, got {value!r}"
        if not self.low <= value <= self.high:
            because = self.low_because if value < self.low else self.high_because
            return f"must be between {self.low} and {self.high}{f' ({because})' if because else ''}, got {value}"
        return None


@frozen
class Override:
    """A rule a tenant may set for itself: the policy field it replaces (seconds for a duration), within bounds."""

    policy: str  # "reset", "otp" or "send_limits": which of the deployment's policies it replaces a field of
    field: str
    bounds: Bounds
    doc: str


# The rules a tenant may set, by the name its settings and flags use; the deployment's setting of the same
# name (AUTHLEDGER_<NAME>) is declared with the same bounds, so that no tenant goes below a floor.
POLICY_OVERRIDES: dict[str, Override] = {
    "reset_ttl": Override("reset", "ttl", Bounds(1, int(RESET_TTL_HARD_CAP.total_seconds())),
                          "Seconds a reset link stays valid."),
    "reset_cooldown": Override("reset", "cooldown", Bounds(0, 3600),
                               "Seconds during which the same reset request returns the open link."),
    "reset_hourly_limit": Override("reset", "hourly_limit", Bounds(1, 1000), "Reset requests per user per hour."),
    "otp_ttl": Override("otp", "ttl", Bounds(1, 3600), "Seconds a one-time code stays valid."),
    "otp_cooldown": Override("otp", "cooldown", Bounds(0, 3600),
                             "Seconds during which the same code request returns the open challenge."),
    "otp_hourly_limit": Override("otp", "hourly_limit", Bounds(1, 1000), "Code requests per user per hour."),
    "otp_digits": Override("otp", "digits", Bounds(OTP_DIGITS_FLOOR, MAX_OTP_DIGITS,
                                                   low_because="NIST SP 800-63B: at least 6 digits"),
                           "Digits of new one-time codes."),
    "limit_per_address": Override("send_limits", "per_address", Bounds(2, 100),
                                  "Emails per recipient address per hour."),
}


def check_override(name: str, value: object) -> int:
    """``value`` for the rule ``name``, or ``InvalidInput`` naming the bound it breaks."""
    if name not in POLICY_OVERRIDES:
        raise InvalidInput(f"{name!r} is not a rule a tenant may set; it may set {', '.join(POLICY_OVERRIDES)}")
    if (problem := POLICY_OVERRIDES[name].bounds.problem(value)) is not None:
        raise InvalidInput(f"{name} {problem}")
    assert isinstance(value, int)
    return value


Policy = TypeVar("Policy", ResetPolicy, OtpPolicy, SendLimits)


def with_overrides(policy: Policy, kind: str, overrides: Mapping[str, int]) -> Policy:
    """``policy`` (the deployment's ``kind`` policy) with a tenant's overrides of it; ``ConfigError`` when the
    result breaks a rule across fields (a per-address limit at or below its per-IP share)."""
    changes: dict[str, Any] = {}
    for name, value in overrides.items():
        override = POLICY_OVERRIDES[name]
        if override.policy == kind:
            current = getattr(policy, override.field)
            changes[override.field] = timedelta(seconds=value) if isinstance(current, timedelta) else value
    return evolve(policy, **changes) if changes else policy
