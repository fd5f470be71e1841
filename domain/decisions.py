"""What a decision returns, and the checks both request flows share.

A decide function never writes anything: it returns a ``Decision`` that the
service layer appends (``events`` to the user's stream, each email to its own
``email:<message_id>`` stream) in one transaction, then answers the caller
from ``outcome``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TypeVar
from uuid import UUID

from attrs import evolve, frozen

from domain.addresses import check_address
from domain.email import EmailQueued
from domain.errors import IdempotencyMismatch, InvalidInput

K = TypeVar("K")
# "At most N emails per user and flow per hour": a sliding window.
RATE_WINDOW = timedelta(hours=1)
# How long a user's state remembers a request once it is closed (superseded,
# completed, verified, locked): older ones can no longer change an answer.
# Receipts live at most this long (the policies check it), the rate window
# is an hour, and a closed link or code is refused either way (as "not
# valid" once forgotten). So the state holds at most two days of requests,
# and a decision costs the same on day 1 and day 1,000.
KEPT_FOR = timedelta(hours=48)
# Repeats within the cooldown bind this many new idempotency keys per window
# one event each; further keys are answered alike but counted, not bound.
BOUND_KEYS_PER_WINDOW = 10
# Rejected presentations of known links and codes (used, superseded, expired,
# locked, erased) written one event each per window and stream; further ones
# are answered alike and counted (``RequestsCounted`` with answer "rejected").
REJECTIONS_PER_WINDOW = 10


@frozen
class RequestOutcome:
    """A reset request or OTP challenge the caller can point the user to.

    ``reused`` is True when nothing new was written: an idempotent replay or
    a repeat within the cooldown. ``replayed`` is True only for the replay:
    the same idempotency key answered again with its first outcome.
    """

    request_id: UUID
    message_id: UUID
    expires_at: datetime
    reused: bool
    replayed: bool = False


@frozen
class Refused:
    """The request was refused and the refusal recorded; retry at ``retry_at``."""

    reason: str  # "rate_limited"
    retry_at: datetime


@frozen
class ConsumeOutcome:
    """A reset token was consumed: the caller may now change this user's password."""

    request_id: UUID
    user_id: str
    completed_at: datetime


@frozen
class VerifyOutcome:
    """The result of checking an OTP code that was written to the log."""

    verified: bool
    attempts_left: int
    locked: bool


@frozen
class Rejected:
    """A known link or code was presented when it could no longer be used; the refusal was recorded (or counted).

    ``message`` is the answer's words, those a caller got before rejections were recorded.
    """

    reason: str  # "used", "superseded", "expired", "locked", "erased" or "account_locked"
    message: str
    retry_at: datetime | None = None  # while the whole account is locked: when codes are accepted again


@frozen
class Counted:
    """A call answered as the stream's last ones were: to be counted, not written as an event."""

    flow: str  # "reset" or "otp"
    user_id: str
    answer: str  # "refused", "reused" or "rejected"
    at: datetime
    client: str | None


@frozen
class Decision:
    """Events for the user stream (in order), emails to queue, the answer, and any call to count instead."""

    events: tuple[object, ...]
    emails: tuple[EmailQueued, ...]
    # Or a flow's own answer (``domain.reset.LinkValid``).
    outcome: RequestOutcome | Refused | ConsumeOutcome | VerifyOutcome | Rejected | object
    counted: Counted | None = None


@frozen
class RequestsCounted:
    """Calls of one window answered alike, recorded as one count instead of one event each.

    Floods are bounded this way (issue 13): in a window (an hour of the clock,
    UTC) the first refusal of a run is written as ``ResetRequestRefused`` /
    ``OtpRequestRefused`` and the first ``BOUND_KEYS_PER_WINDOW`` repeats
    with a new idempotency key as ``IdempotencyKeyBound``; every later call
    answered alike only bumps a counter row (``request_counts``) in its
    transaction. When the stream's next event is appended (another answer,
    or the first refusal of the next window) the counter's final figures are
    appended first as this event and the row is emptied. A run is any
    sequence of alike answers with no other event between them, so however
    many calls it takes, a run writes per window at most two events of
    refusals, or ``BOUND_KEYS_PER_WINDOW`` + 1 of repeats.

    Rejected presentations of known links and codes are bounded alike, but
    by their own count per window (``REJECTIONS_PER_WINDOW``, see
    ``count_rejections``) rather than by a run: other events between them
    must not let a flood of presentations write one event each.

    ``count`` is the number of calls counted (those not written one by one);
    ``clients`` the API clients they came from (None: no client, the CLI).
    """

    flow: str  # "reset" or "otp"
    user_id: str
    answer: str  # "refused", "reused" or "rejected"
    window_start: datetime
    first_at: datetime
    last_at: datetime
    count: int
    clients: tuple[str | None, ...]


@frozen
class CountingRun:
    """The run of alike answers the stream's last events belong to, if they were alike."""

    answer: str  # "refused" or "reused"
    window_start: datetime
    written: int  # events of this run and window written one by one


def window_of(moment: datetime) -> datetime:
    """The start of the counting window ``moment`` falls in: its hour of the clock (UTC), which a reviewer can name."""
    return moment.replace(minute=0, second=0, microsecond=0)


def run_after(run: CountingRun | None, event: object, refusal_type: type) -> CountingRun | None:
    """The counting run once ``event`` is on the stream: alike answers extend it, any other event ends it.

    ``refusal_type`` is the flow's refusal event (it has ``refused_at``). A
    ``RequestsCounted`` leaves the run as it was: it is only ever appended
    just before the event that ends or restarts the run.
    """
    if isinstance(event, refusal_type):
        answer, at = "refused", event.refused_at  # type: ignore[attr-defined]
    elif isinstance(event, IdempotencyKeyBound):
        answer, at = "reused", event.bound_at
    elif isinstance(event, RequestsCounted):
        return run
    else:
        return None
    window = window_of(at)
    if run is not None and run.answer == answer and run.window_start == window:
        return evolve(run, written=run.written + 1)
    return CountingRun(answer, window, 1)


def count_floods(
    decision: Decision, run: CountingRun | None, *, flow: str, user_id: str, client: str | None, now: datetime,
) -> Decision:
    """The decision to write, once floods are counted (see ``RequestsCounted``).

    A refusal after the run's first one in the same window, or a key bound
    after ``BOUND_KEYS_PER_WINDOW`` in it, writes no event and is counted
    instead. Such a key is answered with the open request but not bound:
    a retry within the cooldown gets the same answer, a retry after it is
    decided afresh. Honest clients retry with the same key, which replays.
    """
    window = window_of(now)
    if run is None or run.window_start != window:
        return decision
    refused = isinstance(decision.outcome, Refused) and run.answer == "refused"
    bound = [e for e in decision.events if isinstance(e, IdempotencyKeyBound)]
    reused = bool(bound) and run.answer == "reused" and run.written >= BOUND_KEYS_PER_WINDOW
    if not (refused or reused):
        return decision
    kept = () if refused else tuple(e for e in decision.events if not isinstance(e, IdempotencyKeyBound))
    return evolve(decision, events=kept, counted=Counted(flow, user_id, run.answer, now, client))


def rejections_after(written: CountingRun | None, at: datetime) -> CountingRun:
    """The rejections written in the window of ``at`` once one more is on the stream."""
    window = window_of(at)
    if written is not None and written.window_start == window:
        return evolve(written, written=written.written + 1)
    return CountingRun("rejected", window, 1)


def count_rejections(
    decision: Decision, written: CountingRun | None, *, flow: str, user_id: str, client: str | None, now: datetime,
) -> Decision:
    """A rejected presentation's decision, once floods are counted: past ``REJECTIONS_PER_WINDOW`` written
    in this window, it writes nothing and is counted instead. The answer is the same either way."""
    if written is None or written.window_start != window_of(now) or written.written < REJECTIONS_PER_WINDOW:
        return decision
    return evolve(decision, events=(), counted=Counted(flow, user_id, "rejected", now, client))


def require_utc(moment: datetime) -> None:
    """Raise ``ValueError`` unless ``moment`` is timezone-aware UTC.

    Naive datetimes compare wrongly with stored ones and shift by the server's
    zone; the domain refuses them instead of guessing.
    """
    if not isinstance(moment, datetime) or moment.utcoffset() != timedelta(0):
        raise ValueError(f"expected a timezone-aware UTC datetime, got {moment!r}")


@frozen
class PastRequest:
    """What the shared request rules read of an earlier reset request or OTP
    challenge."""

    outcome: RequestOutcome  # the answer it was first given
    created_at: datetime
    params: tuple[str, ...]  # what a replay or a repeat must match
    is_open: bool


def kept_receipts(receipts: Mapping[K, Receipt], horizon: datetime) -> dict[K, Receipt]:
    """The receipts created at or after ``horizon``: older ones have lapsed (``KEPT_FOR``)."""
    return {key: receipt for key, receipt in receipts.items() if receipt.created_at >= horizon}


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
    """Rule (a): the first answer again, writing nothing, when ``first`` was
    created with this idempotency key within ``receipt_ttl``.

    ``IdempotencyMismatch`` when the key comes back with other parameters.
    """
    if first is None or now - first.created_at >= receipt_ttl:
        return None
    if first.params != params:
        raise IdempotencyMismatch()
    return Decision(events=(), emails=(), outcome=evolve(first.outcome, reused=True, replayed=True))


def reuse_or_refuse(
    past: Sequence[PastRequest],
    params: tuple[str, ...],
    *,
    now: datetime,
    cooldown: timedelta,
    hourly_limit: int,
    refusal: Callable[[datetime], object],
) -> Decision | None:
    """Rules (b) and (c): reuse the newest open request when it is unexpired,
    younger than ``cooldown`` and for the same parameters; else, when
    ``hourly_limit`` requests fall within the last hour, record
    ``refusal(retry_at)``. None when a new request may be made."""
    open_requests = [p for p in past if p.is_open]
    if open_requests:
        newest = max(open_requests, key=lambda p: p.created_at)
        if (
            now < newest.outcome.expires_at
            and now - newest.created_at < cooldown
            and newest.params == params
        ):
            return Decision(events=(), emails=(), outcome=evolve(newest.outcome, reused=True))
    retry_at = rate_limit_retry_at((p.created_at for p in past), now=now, limit=hourly_limit)
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


def _has_unsafe_characters(value: str) -> bool:
    # Control characters (CR/LF above all) would let input inject email
    # headers or forge log lines; whitespace is never valid in these fields.
    return any(ch.isspace() or not ch.isprintable() for ch in value)


def check_text(name: str, value: object, *, max_length: int) -> None:
    """Raise ``InvalidInput`` unless ``value`` is a short single-token string."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{name} must be a non-empty string")
    if len(value) > max_length:
        raise InvalidInput(f"{name} must be at most {max_length} characters")
    if _has_unsafe_characters(value):
        raise InvalidInput(f"{name} must not contain whitespace or control characters")


MAX_REASON_LENGTH = 500
EMAIL_ADDRESS = re.compile(r"[^\s@]+@[^\s@]+\.[^\s@]+")


def operator_reason(reason: object, *, blank: str, instead: str) -> str:
    """An operator's reason for the record, trimmed; ``InvalidInput`` (``blank`` when empty) unless it is one
    line of plain text, short, and free of email addresses (``instead`` says what to write)."""
    reason = reason.strip() if isinstance(reason, str) else ""
    if not reason:
        raise InvalidInput(blank)
    if any(ord(c) < 32 or ord(c) == 127 for c in reason):
        raise InvalidInput("the reason holds control characters; give it as one line of plain text")
    if len(reason) > MAX_REASON_LENGTH:
        raise InvalidInput(f"the reason is {len(reason)} characters long; keep it to {MAX_REASON_LENGTH}")
    if EMAIL_ADDRESS.search(reason):
        # The reason stays in the log in clear: `privacy forget` could not erase an address in it.
        raise InvalidInput(f"the reason holds an email address; {instead}")
    return reason


def check_optional_text(name: str, value: object, *, max_length: int) -> None:
    """Like ``check_text``, but None is allowed."""
    if value is not None:
        check_text(name, value, max_length=max_length)


def check_request_input(
    user_id: object, recipient: object, idempotency_key: object, client: object
) -> None:
    """Raise ``InvalidInput`` unless a request command's common fields are
    well formed, so that bad input is refused before anything is decided."""
    check_text("user_id", user_id, max_length=200)
    check_address(recipient)
    check_optional_text("idempotency_key", idempotency_key, max_length=255)
    check_optional_text("client", client, max_length=200)
