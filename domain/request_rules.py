"""The rules both request flows share before they make a new request.

In order: (a) an idempotency key answered before gets its first answer again
(``replay_receipt``); (b) a repeat within the cooldown reuses the open request,
and a new key is bound to it (``reuse_or_refuse``, ``bind_key_to_reuse``);
(c) past the hourly limit the request is refused (``rate_limit_retry_at``).
Also how long a receipt may live at most (``KEPT_FOR``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from uuid import UUID

from attrs import evolve, frozen

from domain.decisions import Decision, Refused, RequestOutcome
from domain.errors import IdempotencyMismatch

# "At most N emails per user and flow per hour": a sliding window.
RATE_WINDOW = timedelta(hours=1)
# The longest an idempotency receipt may live (the policies check it): a
# retry two days on is a new request. A user's state remembers every request
# (a used link is told so a year on); what bounds a decision's cost is that
# it reads only the stream's live part and what it looks up by key
# (projections/snapshots.py).
KEPT_FOR = timedelta(hours=48)


@frozen
class PastRequest:
    """What the shared request rules read of an earlier reset request or OTP
    challenge."""

    outcome: RequestOutcome  # the answer it was first given
    created_at: datetime
    params: tuple[str, ...]  # what a replay or a repeat must match
    is_open: bool


@frozen
class Receipt:
    """What an idempotency key names on a user's stream: a request, since when."""

    request_id: UUID
    created_at: datetime  # when the key was first answered; receipts live from here


@frozen
class IdempotencyKeyBound:
    """An idempotency key was answered with an existing request (a repeat
    within the cooldown): a replay of the key returns that request, even
    after the cooldown has passed. Written on the user's stream of ``flow``."""

    flow: str  # "reset" or "otp"
    user_id: str
    request_id: UUID
    message_id: UUID
    client: str | None
    idempotency_key: str
    bound_at: datetime


def first_answer(receipt: Receipt, request: PastRequest, *, created_with_key: bool) -> PastRequest:
    """``request`` as its receipt's key was first answered with, for a replay to answer exactly the same.

    A key answered a request it created (``reused`` false), or one it was bound
    to by rule (b) (``reused`` true). Rule (a) answers a key while its receipt
    lives, before rule (b) could bind it, and a request is reusable only
    within a cooldown shorter than that (``domain.policy``): so a key is bound
    only to a request some other call made.
    """
    return evolve(request, created_at=receipt.created_at,
                  outcome=evolve(request.outcome, reused=not created_with_key))


def bind_key_to_reuse(
    decision: Decision, *, flow: str, user_id: str, client: str | None,
    idempotency_key: str | None, now: datetime,
) -> Decision:
    """Rule (b) with a key: record that the key now names the reused request.

    Without it the key would name nothing, and a retry after the cooldown
    would make a new request although the first answer promised the old one.
    A refusal binds nothing: a retry after ``retry_at`` is meant to succeed.
    """
    outcome = decision.outcome
    if idempotency_key is None or not isinstance(outcome, RequestOutcome) or not outcome.reused:
        return decision
    bound = IdempotencyKeyBound(
        flow, user_id, outcome.request_id, outcome.message_id, client, idempotency_key, now
    )
    return evolve(decision, events=(*decision.events, bound))


def replay_receipt(
    first: PastRequest | None, params: tuple[str, ...], *, now: datetime, receipt_ttl: timedelta
) -> Decision | None:
    """Rule (a): the first answer again, word for word, writing nothing, when
    ``first`` (``first_answer``) was answered to this idempotency key within
    ``receipt_ttl``; only ``replayed`` tells it apart.

    ``IdempotencyMismatch`` when the key comes back with other parameters.
    """
    if first is None or now - first.created_at >= receipt_ttl:
        return None
    if first.params != params:
        raise IdempotencyMismatch()
    return Decision(events=(), emails=(), outcome=evolve(first.outcome, replayed=True))


def reuse_or_refuse(
    open_requests: Sequence[PastRequest],
    request_times: Iterable[datetime],
    params: tuple[str, ...],
    *,
    now: datetime,
    cooldown: timedelta,
    hourly_limit: int,
    refusal: Callable[[datetime], object],
) -> Decision | None:
    """Rules (b) and (c): reuse the newest of ``open_requests`` when it is
    unexpired, younger than ``cooldown`` and for the same parameters; else,
    when ``hourly_limit`` of ``request_times`` (when each request was made)
    fall within the last hour, record ``refusal(retry_at)``. None when a new
    request may be made."""
    if open_requests:
        newest = max(open_requests, key=lambda p: p.created_at)
        if (
            now < newest.outcome.expires_at
            and now - newest.created_at < cooldown
            and newest.params == params
        ):
            return Decision(events=(), emails=(), outcome=evolve(newest.outcome, reused=True))
    retry_at = rate_limit_retry_at(request_times, now=now, limit=hourly_limit)
    if retry_at is None:
        return None
    return Decision(
        events=(refusal(retry_at),), emails=(), outcome=Refused("rate_limited", retry_at)
    )


def rate_limit_retry_at(
    times: Iterable[datetime], *, now: datetime, limit: int
) -> datetime | None:
    """When the next request is allowed if ``limit`` of ``times`` fall within
    the last hour, else None."""
    recent = sorted(t for t in times if t > now - RATE_WINDOW)
    if len(recent) < limit:
        return None
    # The window must shed enough entries to fall below the limit; with a
    # lowered limit that can be more than just the oldest one.
    return recent[len(recent) - limit] + RATE_WINDOW
