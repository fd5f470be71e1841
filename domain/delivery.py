"""Delivery rules of one email: leases, and retries with backoff for as long as the email is useful.

Pure: the worker passes in the time, the new lease token and a jitter value,
and appends what these functions return.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from uuid import UUID

from attrs import frozen

from domain.email import (
    DeliveryAbandoned,
    DeliveryOutcomeUnknown,
    DeliveryRedriven,
    LeaseClaimed,
    LeaseExpired,
    SendAttemptFailed,
)
from domain.input_checks import operator_reason
from domain.errors import InvalidInput, NotFound


# With a provider that drops repeats, outcomes wait to be recorded together
# at most this long: a slow provider must not keep outcomes unrecorded until
# their leases run out and another worker sends them all again. A lease must
# outlast a provider call, the safety margin and this wait.
RECORD_WITHIN = timedelta(seconds=1)


@frozen
class DeliveryPolicy:
    lease: timedelta = timedelta(seconds=45)
    # Never start a provider call with less than this much lease left: the
    # call could outlive the lease and race the worker that claims next.
    margin: timedelta = timedelta(seconds=5)
    # An optional hard cap. Without one, a transient failure is retried until
    # the link or code expires: an outage longer than five quick attempts must
    # not lose mail that is still wanted. It counts attempts since the last
    # re-drive (``DeliveryRedriven`` starts the count again).
    max_attempts: int | None = None
    backoff_base: timedelta = timedelta(seconds=2)
    backoff_cap: timedelta = timedelta(seconds=60)
    # A "password changed" notice has no link to expire; it is still worth
    # sending this long after the change.
    notice_useful_for: timedelta = timedelta(hours=24)
    # How many times a message is sent again, through a provider that cannot
    # drop a repeat, after an attempt whose outcome is unknown. Each such
    # retry may be a second copy; none may be a lost email. One retry covers
    # the common case (a connection lost once) at the cost of at most two
    # copies of any email.
    unknown_outcome_retries: int = 1


@frozen
class LeaseView:
    """What a worker knows of a due message when it claims it."""

    message_id: UUID
    state: str  # "pending" or "leased" (with a lease that ran out)
    lease_owner: str | None
    lease_token: UUID | None
    attempt_count: int


def claim_events(
    due: LeaseView, *, owner: str, lease_token: UUID, now: datetime, policy: DeliveryPolicy
) -> list[object]:
    """``LeaseExpired`` for a lease that ran out, then ``LeaseClaimed`` with the next attempt number."""
    events: list[object] = []
    if due.state == "leased" and due.lease_owner is not None and due.lease_token is not None:
        events.append(LeaseExpired(due.message_id, due.lease_owner, due.lease_token, expired_at=now))
    events.append(
        LeaseClaimed(
            message_id=due.message_id,
            lease_owner=owner,
            lease_token=lease_token,
            claimed_at=now,
            lease_expires_at=now + policy.lease,
            attempt=due.attempt_count + 1,
        )
    )
    return events


def outcome_left_unknown(
    message_id: UUID, *, unknown_outcomes: int, idempotent: bool, last_error: str | None, lease_token: UUID,
    now: datetime, policy: DeliveryPolicy,
) -> DeliveryOutcomeUnknown | None:
    """``DeliveryOutcomeUnknown`` when sending once more could only add a copy; None when it may be sent.

    ``unknown_outcomes`` counts the attempts that may have reached the
    provider without an answer: failures with an unknown outcome and leases
    that ran out (the worker holding one may have died mid-send). A provider
    that drops repeats (``idempotent``) makes a retry harmless, so only the
    others are bounded.
    """
    if idempotent or unknown_outcomes <= policy.unknown_outcome_retries:
        return None
    error = last_error or "the lease ran out while a worker held it"
    return DeliveryOutcomeUnknown(message_id, now, unknown_outcomes, error, lease_token)


def enough_lease_left(lease_expires_at: datetime, *, now: datetime, policy: DeliveryPolicy) -> bool:
    return lease_expires_at - now >= policy.margin


def backoff(attempt: int, *, jitter: float, policy: DeliveryPolicy) -> timedelta:
    """Exponential backoff with full jitter: a random point in [0, base * 2**(attempt-1)], capped.

    ``jitter`` is a number in [0, 1) supplied by the caller, so that workers
    retrying the same failure spread out instead of returning in lockstep.
    """
    doubling: int = 2 ** (attempt - 1)  # typeshed types int ** int as Any (a negative power is a float)
    ceiling = min(policy.backoff_base * doubling, policy.backoff_cap)
    return max(ceiling * jitter, timedelta(milliseconds=100))


def failure_events(
    message_id: UUID,
    *,
    lease_token: UUID,
    attempt: int,
    error: str,
    retryable: bool,
    outcome_unknown: bool,
    now: datetime,
    jitter: float,
    policy: DeliveryPolicy,
    useful_until: datetime | None = None,
) -> list[object]:
    """What a failed attempt records: a retry later, a permanent failure, or abandonment.

    A retry is never scheduled past ``useful_until`` (when the link or code
    expires): the message falls due then, and the fresh read before its next
    send skips it as expired.
    """
    if retryable and policy.max_attempts is not None and attempt >= policy.max_attempts:
        return [
            SendAttemptFailed(message_id, lease_token, attempt, now, error, retryable, None, outcome_unknown),
            DeliveryAbandoned(message_id, abandoned_at=now, attempts=attempt, last_error=error,
                              lease_token=lease_token),
        ]
    retry_at = now + backoff(attempt, jitter=jitter, policy=policy) if retryable else None
    if retry_at is not None and useful_until is not None:
        retry_at = max(min(retry_at, useful_until), now)
    return [SendAttemptFailed(message_id, lease_token, attempt, now, error, retryable, retry_at, outcome_unknown)]


# Only messages that ended without reaching anyone can be sent again: a sent
# one would be a second email, a skipped one was not wanted, and a pending or
# leased one is still on its way.
REDRIVABLE = ("abandoned", "failed", "unknown")


def redrive_reason(reason: str) -> str:
    """The operator's reason, trimmed; ``InvalidInput`` when it is blank or too long to be a reason."""
    return operator_reason(reason, instead="name the message or the ticket instead",
                           blank="a re-drive needs a reason (--reason): say why the message is sent again")


def redrive_events(
    message_id: UUID, state: str | None, *, actor: str, reason: str, now: datetime
) -> list[object]:
    """``DeliveryRedriven`` for an abandoned or failed message; an error naming what is wrong otherwise.

    ``state`` is the message's outbox state, None when there is no such
    message. The worker still reads the request fresh before sending, so a
    re-driven message whose link expired meanwhile is skipped, not sent.
    """
    reason = redrive_reason(reason)
    if state is None:
        raise NotFound(f"no message {message_id} in the outbox")
    if state not in REDRIVABLE:
        raise InvalidInput(f"message {message_id} is {state}: only abandoned or failed messages can be re-driven")
    return [DeliveryRedriven(message_id, redriven_at=now, actor=actor, reason=reason)]
