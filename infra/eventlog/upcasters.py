"""Upcasters: (tag, version) -> function turning that payload into version + 1.

The mechanism itself is tested with a made-up event type in
tests/unit/test_serialization.py; each real upcaster with a stored payload of
the old shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# One payload version in, the next version out.
Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


def otp_challenge_issued_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    """Version 1 did not record the code's length: delivery and verification
    took it from the policy of the moment. Read it as 6: the default of
    ``OtpPolicy.digits`` and ``AUTHLEDGER_OTP_DIGITS`` (and of DESIGN.md)
    while version 1 was written, so the length nearly every version-1 code
    was sent with. The log does not say what an operator had configured; an
    installation that ran with another length should upgrade once no
    challenge is open (AUTHLEDGER_OTP_TTL is at most an hour), or the ones
    open then stop accepting their codes."""
    return {**payload, "digits": 6}


def subject_erased_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    """Version 1 recorded no reason: `privacy forget` did not ask for one. Its reason reads as None (not
    given), never as an invented one."""
    return {**payload, "reason": None}


def before_nonces(payload: dict[str, Any]) -> dict[str, Any]:
    """Requests and challenges recorded before nonces were derived with key
    and id alone: derivation 1, no nonce. They keep verifying until they expire."""
    return {**payload, "derivation": 1, "nonce": None}


def tenant_configured_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    """Version 1 could set only the OTP purposes; every setting since (reset URL, sender, templates, policy
    overrides...) reads as not set by it, and nothing as cleared."""
    return dict(payload)


UPCASTERS: dict[tuple[str, int], Upcaster] = {
    ("OtpChallengeIssued", 1): otp_challenge_issued_v1_to_v2,
    ("SubjectErased", 1): subject_erased_v1_to_v2,
    ("OtpChallengeIssued", 2): before_nonces,
    ("ResetRequested", 1): before_nonces,
    ("TenantConfigured", 1): tenant_configured_v1_to_v2,
}
