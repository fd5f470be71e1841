"""How fast a user's streams can grow: the events an hour of the clock can add at most, whatever callers do.

The log is never pruned, so the promise that it stays bounded is a figure a
retention budget can use. It follows from the rules, not from any caller's
manners: the hourly limit caps new requests, one request is open at a time,
a challenge takes at most ``max_attempts`` wrong codes, and floods stop at
the ceiling (``domain.counting.FLOOD_EVENTS_PER_WINDOW``). With the default
policies a reset stream grows by at most 49 events an hour and an OTP
stream by at most 86, however many calls are made and whatever they vary.
A property test drives random call sequences against these figures
(tests/unit/test_flood_ceiling_property.py).
"""

from __future__ import annotations

from domain.counting import CLOSING_COUNTS, FLOOD_EVENTS_PER_WINDOW
from domain.policy import OtpPolicy, ResetPolicy

# A window's floods: events written one by one (the counts written while it
# is open among them), and the counts of an earlier window that closed past
# its ceiling, which the hour's first append or ``serve`` writes.
FLOODS_PER_HOUR = FLOOD_EVENTS_PER_WINDOW + CLOSING_COUNTS


def reset_events_per_hour_at_most(policy: ResetPolicy) -> int:
    """The most events one hour of the clock can add to a user's reset stream."""
    made = policy.hourly_limit  # ResetRequested: the hourly limit holds within any hour of the clock
    # ResetSuperseded (or support's ResetInvalidated: each request is closed once, whichever closes it): at most
    # one request is open, and only a new one replaces it
    replaced = made
    completed = made + 1  # ResetCompleted: each request open in the hour, once (one may predate it)
    return made + replaced + completed + FLOODS_PER_HOUR


def otp_events_per_hour_at_most(policy: OtpPolicy) -> int:
    """The most events one hour of the clock can add to a user's OTP stream."""
    issued = policy.hourly_limit  # OtpChallengeIssued
    replaced = issued  # OtpChallengeSuperseded or OtpChallengeInvalidated: at most one challenge is open
    usable = issued + 1  # the challenges a code can be checked against in the hour (one may predate it)
    wrong = usable * policy.max_attempts  # OtpVerificationFailed: a challenge locks at max_attempts
    locks = usable + wrong // policy.account_lock_threshold + 1  # OtpChallengeLockedOut, challenge and account
    verified = usable  # OtpChallengeVerified
    return issued + replaced + wrong + locks + verified + FLOODS_PER_HOUR
