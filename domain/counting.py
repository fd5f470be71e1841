"""Floods counted rather than written: alike answers in one window become one ``RequestsCounted``.

The state folds each stream's last run of alike answers (``run_after``,
``rejections_after``); a decision past the run's allowance writes nothing and
is counted instead (``count_floods``, ``count_rejections``).
"""

from __future__ import annotations

from datetime import datetime

from attrs import evolve, frozen

from domain.decisions import Counted, Decision, Refused
from domain.request_rules import IdempotencyKeyBound

# Repeats within the cooldown bind this many new idempotency keys per window
# one event each; further keys are answered alike but counted, not bound.
BOUND_KEYS_PER_WINDOW = 10
# Rejected presentations of known links and codes (used, superseded, expired,
# locked, erased) written one event each per window and stream; further ones
# are answered alike and counted (``RequestsCounted`` with answer "rejected").
REJECTIONS_PER_WINDOW = 10


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
    appended first as this event and the row is emptied; a window that has
    closed is written so by ``serve`` too, whatever comes next. A run is any
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
