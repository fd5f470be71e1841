"""Floods counted rather than written: alike answers in one window become one ``RequestsCounted``.

The state folds each stream's last run of alike answers (``run_after``,
``rejections_after``); a decision past the run's allowance writes nothing and
is counted instead (``count_floods``, ``count_rejections``).

Runs alone do not bound the log: any other event ends a run, so a caller who
varies a parameter (the address, the idempotency key, the purpose, the
client IP) would start a new run with every call, each writing an event. The
state therefore also folds how many events floods have written in the window
(``FloodTally``, ``flood_after``), and past ``FLOOD_EVENTS_PER_WINDOW``
every such call is counted, whatever it varies.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from attrs import evolve, frozen

from domain.decisions import Counted, Decision, Refused
from domain.limits import window_of
from domain.otp_events import OtpCodeRejected, OtpRequestRefused
from domain.request_rules import IdempotencyKeyBound
from domain.reset_events import ResetRequestRefused, ResetTokenRejected

# Repeats within the cooldown bind this many new idempotency keys per window
# one event each; further keys are answered alike but counted, not bound.
BOUND_KEYS_PER_WINDOW = 10
# Rejected presentations of known links and codes (used, superseded, expired,
# locked, erased) written one event each per window and stream; further ones
# are answered alike and counted (``RequestsCounted`` with answer "rejected").
REJECTIONS_PER_WINDOW = 10
# The ceiling: the events a user's stream (of one flow) gets from floods in a
# window, whatever the caller varies: refusals, key bindings and rejected
# presentations written one by one, and the counts written before the next
# event. Past it every such call is counted, and the counts wait for the
# window to close. Why 30: one run of each kind writes at most a refusal,
# BOUND_KEYS_PER_WINDOW bindings and REJECTIONS_PER_WINDOW rejections, each
# kind with its count (24 events), so an honest client that retries, or a
# user who clicks an old link a few times, never meets the ceiling, and a
# reviewer still reads those calls one by one, each with its caller; and 30
# an hour (33 with the closing counts, under 800 a day per stream) is a
# figure a retention budget can carry, whatever an attacker sends. A
# constant, not a setting: it bounds the log, and a deployment that raised
# it would unbound it again.
FLOOD_EVENTS_PER_WINDOW = 30
# The answers a call can be counted under; ``request_counts`` keeps one row
# per stream and answer, so a window that closed past its ceiling writes at
# most this many counts after it.
COUNTED_ANSWERS = ("refused", "reused", "rejected")
CLOSING_COUNTS = len(COUNTED_ANSWERS)


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

    Whatever the runs allow, a window's events from floods (these counts
    among them) stop at ``FLOOD_EVENTS_PER_WINDOW``: every later call is
    counted, and the counts are no longer written before the stream's next
    event (``counts_fit``) but once the window has closed, at most one per
    answer (``CLOSING_COUNTS``).

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


@frozen
class FloodTally:
    """The events floods have written on a stream in its latest window that had one (see ``flood_window``)."""

    window_start: datetime
    written: int


def run_after(run: CountingRun | None, event: object, refusal_type: type) -> CountingRun | None:
    """The counting run once ``event`` is on the stream: alike answers extend it, any other event ends it.

    ``refusal_type`` is the flow's refusal event (it has ``refused_at``). A
    ``RequestsCounted`` leaves the run as it was: it answers no call of its
    own, and is appended just before the stream's next event or once its
    window has closed.
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
    decision: Decision, run: CountingRun | None, tally: FloodTally | None, *, flow: str, user_id: str,
    client: str | None, now: datetime,
) -> Decision:
    """The decision to write, once floods are counted (see ``RequestsCounted``).

    A refusal after the run's first one in the same window, a key bound
    after ``BOUND_KEYS_PER_WINDOW`` in it, or either once the window's
    ``tally`` has reached the ceiling, writes no event and is counted
    instead. Such a key is answered with the open request but not bound:
    a retry within the cooldown gets the same answer, a retry after it is
    decided afresh. Honest clients retry with the same key, which replays.
    """
    answer = "refused" if isinstance(decision.outcome, Refused) else "reused"
    if _past_ceiling(decision, tally, now):
        return _counted(decision, answer, flow=flow, user_id=user_id, client=client, now=now)
    if run is None or run.window_start != window_of(now) or run.answer != answer:
        return decision
    bound = any(isinstance(e, IdempotencyKeyBound) for e in decision.events)
    if answer == "reused" and not (bound and run.written >= BOUND_KEYS_PER_WINDOW):
        return decision
    return _counted(decision, answer, flow=flow, user_id=user_id, client=client, now=now)


def rejections_after(written: CountingRun | None, at: datetime) -> CountingRun:
    """The rejections written in the window of ``at`` once one more is on the stream."""
    window = window_of(at)
    if written is not None and written.window_start == window:
        return evolve(written, written=written.written + 1)
    return CountingRun("rejected", window, 1)


def count_rejections(
    decision: Decision, written: CountingRun | None, tally: FloodTally | None, *, flow: str, user_id: str,
    client: str | None, now: datetime,
) -> Decision:
    """A rejected presentation's decision, once floods are counted: past ``REJECTIONS_PER_WINDOW`` written
    in this window, or once the window's ``tally`` has reached the ceiling, it writes nothing and is counted
    instead. The answer is the same either way."""
    bounded = (written is not None and written.window_start == window_of(now)
               and written.written >= REJECTIONS_PER_WINDOW)
    if not (bounded or _past_ceiling(decision, tally, now)):
        return decision
    return _counted(decision, "rejected", flow=flow, user_id=user_id, client=client, now=now)


def flood_window(event: object) -> datetime | None:
    """The window whose ceiling ``event`` counts against, or None when it is not a flood's.

    A flood's events are refusals, key bindings, rejected presentations and
    the counts of those not written one by one; a count belongs to the window
    of the calls it counts, whenever it is written.
    """
    match event:
        case ResetRequestRefused() | OtpRequestRefused():
            return window_of(event.refused_at)
        case IdempotencyKeyBound():
            return window_of(event.bound_at)
        case ResetTokenRejected() | OtpCodeRejected():
            return window_of(event.rejected_at)
        case RequestsCounted():
            return event.window_start
    return None


def flood_after(tally: FloodTally | None, event: object) -> FloodTally | None:
    """The tally once ``event`` is on the stream: a flood's event adds one to its window.

    A count of an older window, written once that window closed, leaves the
    tally of a later one as it was.
    """
    window = flood_window(event)
    if window is None or (tally is not None and window < tally.window_start):
        return tally
    if tally is not None and tally.window_start == window:
        return evolve(tally, written=tally.written + 1)
    return FloodTally(window, 1)


def flood_written(tally: FloodTally | None, *, now: datetime) -> int:
    """How many events floods have written in the window of ``now``."""
    return tally.written if tally is not None and tally.window_start == window_of(now) else 0


def counts_fit(tally: FloodTally | None, counts: Iterable[object], events: Iterable[object], *, now: datetime) -> bool:
    """Whether a stream's ``counts`` not yet written may go just before ``events``: yes unless, with them, the
    window of ``now`` would get more than ``FLOOD_EVENTS_PER_WINDOW`` events from floods.

    When not, they wait: for the window to close, or for the stream's first
    event of a later window, and write at most ``CLOSING_COUNTS`` then.
    """
    for event in (*counts, *events):
        tally = flood_after(tally, event)
    return flood_written(tally, now=now) <= FLOOD_EVENTS_PER_WINDOW


def _past_ceiling(decision: Decision, tally: FloodTally | None, now: datetime) -> bool:
    writes_flood = any(flood_window(event) is not None for event in decision.events)
    return writes_flood and flood_written(tally, now=now) >= FLOOD_EVENTS_PER_WINDOW


def _counted(decision: Decision, answer: str, *, flow: str, user_id: str, client: str | None,
             now: datetime) -> Decision:
    """``decision`` without its flood's events, its call counted under ``answer``: the caller's answer is the same."""
    kept = tuple(event for event in decision.events if flood_window(event) is None)
    return evolve(decision, events=kept, counted=Counted(flow, user_id, answer, now, client))
