"""The case timeline as SVG, drawn on the server from the lookup's events.

Pure: ``draw(events)`` takes the ``RecordedEvent`` list that
``infra.review.lookup`` answered and returns one ``<svg>`` element as text.
No script and no inline style (the console's Content-Security-Policy allows
neither): shapes carry classes that ``static/console.css`` colours, and
``data-*`` attributes that say what each shape is, so that a test (or a
reader with the inspector) can ask "which worker held this lease, and how
did it end?" without reading pixels.

The picture, on one time axis:

- a top lane of requests: each request or challenge, its verification
  attempts (wrong codes, a verified code, a used link, a rejected
  presentation of a link or code that could no longer be used), and an arrow from a superseded request to the one that
  replaced it;
- one lane per email: when it was queued, a bar per lease from claim to
  accept, failure, expiry or release (``data-worker``, ``data-attempt``,
  ``data-outcome``), a marker per attempt with the provider's answer, and
  skips, abandonments and re-drives;
- the erasure, a line across every lane;
- any event of a kind not named above (a fact added later: a bounce, an
  invalidation), a dot named by its event type, on its email's lane or the
  requests' lane.

Every point shape carries a short label beside it (the hover title has the
details), and ``infra.console.marks`` stacks the shapes of one lane in rows
so that none covers another. One quiet stretch that would take over half
the picture (a presentation an hour after the rest, say) is cut out of the
axis: a grey band of fixed width marks the cut, its title says how long it
was, and the rest keeps the width.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from html import escape
from itertools import pairwise
from uuid import UUID

from attrs import define, field

from domain import counting, email, otp_events, privacy, reset_events
from domain.log import RecordedEvent
from infra.console.glance import after, short_id
from infra.console.marks import Mark, label_width, place, rows_of, short_label
from projections.timeline import event_times, format_time

WIDTH = 960
LABEL = 190  # the lanes' names, left of the axis
RIGHT = 20
TOP = 34  # room for the axis' labels
ARC = 26  # room above the requests' lane for the arcs of supersessions
ROW = 20  # one row of a lane; a lane has as many as its marks need
LANE_GAP = 10
BOTTOM = 10
BAR = 14
BREAK = 28  # the width of a cut in the time axis
BREAK_MIN_SECONDS = 60  # a quiet stretch shorter than this is never cut
CUT_RATIO = 3  # a stretch is cut when it is this many times longer than the rest of the case together
TICK_SPACE = 64  # between the starts of two tick labels
# Lease events are the bars; the rest are drawn as marks, or as a generic fact when of a kind not named here.
LEASE_EVENTS = (email.LeaseClaimed, email.LeaseExpired, email.LeaseReleased)
OUTCOME_LABELS = {"failed": "wrong code", "verified": "verified", "locked": "locked", "consumed": "used"}

# How each ending of a lease is named in data-outcome.
LEASE_ENDINGS: dict[type, str] = {
    email.ProviderAccepted: "accepted",
    email.SendAttemptFailed: "failed",
    email.LeaseExpired: "expired",
    email.LeaseReleased: "released",
    email.DeliverySkipped: "skipped",
    email.DeliveryAbandoned: "abandoned",
}
REQUESTS = (reset_events.ResetRequested, otp_events.OtpChallengeIssued)
# What the provider reported after accepting an email: a mark on its lane, after the attempt.
FEEDBACK = (email.ProviderDelivered, email.ProviderBounced, email.ProviderComplained)
SUPERSESSIONS = (reset_events.ResetSuperseded, otp_events.OtpChallengeSuperseded)
# Presentations of a link or code, by outcome. A rejected presentation (a used, superseded, expired or
# erased link or code shown again) is "rejected", its event's reason in data-reason.
VERIFICATIONS: dict[type, str] = {
    otp_events.OtpVerificationFailed: "failed",
    otp_events.OtpChallengeVerified: "verified",
    otp_events.OtpChallengeLockedOut: "locked",
    reset_events.ResetCompleted: "consumed",
    reset_events.ResetTokenRejected: "rejected",
    otp_events.OtpCodeRejected: "rejected",
}


def _attr(value: object) -> str:
    return escape(str(value), quote=True)


@define
class _Lease:
    message_id: UUID
    worker: str
    token: UUID
    attempt: int
    start: datetime
    end: datetime
    outcome: str = "open"


@define
class _Lane:
    message_id: UUID
    label: str
    queued_at: datetime | None = None
    leases: list[_Lease] = field(factory=list)


class _Scale:
    """Time -> x over the case's span (at least one second, so a single moment still has a place).

    Quiet stretches ``CUT_RATIO`` times longer than the rest of the case are cut out, largest first (so
    that the rest keeps at least a quarter of the width uncut, and nearly all of it cut); each cut takes
    ``BREAK`` pixels, and the time around the cuts shares the rest of the width.
    """

    def __init__(self, moments: Iterable[datetime]) -> None:
        moments = sorted(set(moments))
        self.start = moments[0] if moments else datetime.fromtimestamp(0).astimezone()
        end = moments[-1] if moments else self.start
        linear = (end - self.start).total_seconds()
        cuts: list[tuple[datetime, datetime]] = []
        for a, b in sorted(pairwise(moments), key=lambda gap: gap[0] - gap[1]):
            seconds = (b - a).total_seconds()
            rest = linear - seconds
            # Cut only what would squeeze something: a long stretch between moments that have time of their own.
            if seconds < BREAK_MIN_SECONDS or rest <= 0 or seconds < CUT_RATIO * rest:
                break
            cuts.append((a, b))
            linear = rest
        self.cuts = sorted(cuts)
        self.end = end
        self.linear = max(linear, 1.0)
        self.width = WIDTH - LABEL - RIGHT - BREAK * len(cuts)

    def x(self, moment: datetime) -> float:
        seconds, offset = (moment - self.start).total_seconds(), 0.0
        for a, b in self.cuts:
            if moment >= b:
                seconds -= (b - a).total_seconds()
                offset += BREAK
            elif moment > a:  # inside a cut (a lease bar's end, say): in proportion across the band
                seconds -= (moment - a).total_seconds()
                offset += BREAK * (moment - a) / (b - a)
        return round(LABEL + seconds / self.linear * self.width + offset, 1)

    def segments(self) -> list[tuple[datetime, datetime]]:
        """The stretches of time between the cuts."""
        bounds = [self.start, *(moment for cut in self.cuts for moment in cut), self.end]
        return list(zip(bounds[::2], bounds[1::2], strict=True))

    def ticks(self) -> list[tuple[float, str, str]]:
        """Times along the axis (x, anchor, text): every stretch's start, the end, and steps between where
        they fit; no label on another, and none out of the picture."""
        bounds = [a for a, _ in self.segments()] + [self.end]
        steps: list[datetime] = []
        for a, b in self.segments():
            count = max(1, min(4, int((self.x(b) - self.x(a)) // (TICK_SPACE * 1.5))))
            steps += [a + (b - a) * i / count for i in range(1, count + 1)] if b > a else []
        kept: list[tuple[float, str, str, float, float]] = []

        def fits(left: float, right: float) -> bool:
            return all(right + 8 <= other_left or other_right + 8 <= left for _, _, _, other_left, other_right in kept)

        for moment in [*bounds[::-1], *steps]:  # the later bound wins a clash: the first is kept apart below
            x, text = self.x(moment), format_time(moment)[11:19]
            width = label_width(text)
            anchor = ("start" if x - width / 2 < LABEL else "end" if x + width / 2 > WIDTH - RIGHT else "middle")
            left = x - {"start": 0, "middle": width / 2, "end": width}[anchor]
            if moment == self.start or fits(left, left + width):
                if moment == self.start:
                    kept = [k for k in kept if k[3] >= left + width + 8]
                kept.append((x, anchor, text, left, left + width))
        return [(x, anchor, text) for x, anchor, text, _, _ in sorted(kept)]


def _title(text: str) -> str:
    return f"<title>{escape(text)}</title>"


Render = Callable[[float, float], str]  # a mark's shape, drawn at (x, y)


def draw(events: list[RecordedEvent]) -> str:
    """One SVG picture of these events (any order): lanes, lease bars, attempts, supersessions, the erasure."""
    events = sorted(events, key=lambda r: r.global_position)
    times = event_times(events)
    when = {r.global_position: at for r in events if (at := times[r.global_position]) is not None}
    lanes: dict[UUID, _Lane] = {}
    leases: dict[UUID, _Lease] = {}

    def lane(message_id: UUID) -> _Lane:
        return lanes.setdefault(message_id, _Lane(message_id, f"email {short_id(message_id)}"))

    for r in events:
        event, at = r.event, when.get(r.global_position)
        if at is None:
            continue
        if isinstance(event, email.EmailQueued):
            found = lane(event.message_id)
            found.label, found.queued_at = f"{event.template} {short_id(event.message_id)}", at
        elif isinstance(event, email.LeaseClaimed):
            leases[event.lease_token] = lease = _Lease(event.message_id, event.lease_owner, event.lease_token,
                                                       event.attempt, at, event.lease_expires_at)
            lane(event.message_id).leases.append(lease)
        elif type(event) in LEASE_ENDINGS and getattr(event, "lease_token", None) in leases:
            ended = leases.pop(event.lease_token)
            # An expiry is recorded when noticed (by the next claim); the lease itself ran out at its own time.
            ended.end = min(ended.end, at) if isinstance(event, email.LeaseExpired) else at
            ended.outcome = LEASE_ENDINGS[type(event)]
    # A lease still held is drawn to its expiry, so the axis reaches that far.
    scale = _Scale([*when.values(), *(lease.end for lease in leases.values())])
    order = {message_id: index + 1 for index, message_id in enumerate(lanes)}  # lane 0: the requests
    attempts = {lease.token: lease for found in lanes.values() for lease in found.leases}
    first_request = next((when[r.global_position] for r in events
                          if isinstance(r.event, REQUESTS) and r.global_position in when), scale.start)

    def told(what: str, at: datetime) -> str:
        return _title(f"{what} at {format_time(at)} ({after(first_request, at)})")

    marks: list[Mark] = []
    renders: list[Render] = []
    positions: list[int] = []
    supersessions: list[tuple[RecordedEvent, datetime]] = []
    request_marks: dict[UUID | None, int] = {}
    for r in events:
        at = when.get(r.global_position)
        if at is None or isinstance(r.event, privacy.SubjectErased):
            continue  # an erasure is a line across every lane, drawn once the lanes' heights are known
        if isinstance(r.event, SUPERSESSIONS):
            supersessions.append((r, at))
            continue
        if isinstance(r.event, REQUESTS):
            request_marks[_request_id(r.event)] = len(marks)
        drawn = _mark_of(r, at, scale.x(at), order, attempts, told)
        if drawn is not None:
            item, render = drawn
            marks.append(Mark(item.lane, item.x, item.half, short_label(item.label)))
            renders.append(render)
            positions.append(r.global_position)
    placed = place(marks, left=LABEL, right=WIDTH - RIGHT)
    rows = rows_of(marks, placed, len(lanes) + 1)
    tops = [float(TOP + ARC)]
    for count in rows:
        tops.append(tops[-1] + count * ROW + LANE_GAP)
    height = int(tops[-1] - LANE_GAP + BOTTOM)

    def y_of(lane_index: int, row: int = 0) -> float:
        return tops[lane_index] + ROW / 2 + row * ROW

    def lane_y(message_id: UUID) -> float:
        return y_of(order[message_id])

    shapes: list[str] = []
    at_of_request: dict[UUID | None, tuple[float, float]] = {}
    for index, (item, where) in enumerate(zip(marks, placed, strict=True)):
        y = y_of(item.lane, where.row)
        shapes.append(renders[index](item.x, y))
        if item.label:
            shapes.append(_label(item.label, where.label_x(item), y, where.label_right, positions[index]))
    for request_id, index in request_marks.items():
        at_of_request[request_id] = (marks[index].x, y_of(0, placed[index].row))
    arcs = [_arc(r, at, scale, at_of_request) for r, at in supersessions]
    erasures = [f'<line class="erasure" x1="{scale.x(at)}" y1="{TOP - 6}" x2="{scale.x(at)}" y2="{height - 2}" '
                f'data-kind="erasure" data-position="{r.global_position}">'
                f'{_title(f"personal data erased at {format_time(at)}")}</line>'
                for r in events if isinstance(r.event, privacy.SubjectErased) and (at := when.get(r.global_position))]
    bars = [_lease_bar(lease, scale, lane_y(lease.message_id)) for found in lanes.values() for lease in found.leases]
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" role="img" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}" aria-labelledby="timeline-title">',
        '<title id="timeline-title">Timeline of the case: requests, then one lane per email</title>',
        *_axis(scale, height, y_of(0)),
        *_lane_labels(lanes.values(), lane_y),
        *bars,
        *arcs,
        *erasures,
        *shapes,
        "</svg>",
    ])


def _mark_of(r: RecordedEvent, at: datetime, x: float, order: dict[UUID, int], attempts: dict[UUID, _Lease],
             told: Callable[[str, datetime], str]) -> tuple[Mark, Render] | None:
    """The mark of one event (in its lane, at x, with its label) and how to draw its shape; None: no mark."""
    event, position = r.event, r.global_position
    if isinstance(event, REQUESTS):
        request_id = _request_id(event)
        label = "link requested" if isinstance(event, reset_events.ResetRequested) else "code requested"

        def render(x: float, y: float) -> str:
            return (f'<circle class="request" cx="{x}" cy="{y}" r="6" data-kind="request" '
                    f'data-request="{request_id}" data-message="{event.message_id}" data-position="{position}">'
                    f'{told(f"{r.event_type} {request_id}", at)}</circle>')
        return Mark(0, x, 6, label), render
    if type(event) in VERIFICATIONS:
        outcome = VERIFICATIONS[type(event)]
        request_id = _request_id(event)
        reason = getattr(event, "reason", None) if outcome == "rejected" else None
        what = f"{r.event_type} ({reason})" if reason else r.event_type

        def render(x: float, y: float) -> str:
            return (f'<rect class="verification {outcome}" x="{x - 5}" y="{y - 5}" width="10" height="10" '
                    f'data-kind="verification" data-outcome="{outcome}" data-request="{request_id or ""}" '
                    + (f'data-reason="{_attr(reason)}" ' if reason else "")
                    + f'data-position="{position}">{told(what, at)}</rect>')
        return Mark(0, x, 5, f"refused: {reason}" if reason else OUTCOME_LABELS[outcome]), render
    if isinstance(event, counting.RequestsCounted):
        if event.answer != "rejected":
            return None  # counted refusals of requests and repeats: the sentences tell them
        # Past the per-window bound, rejected presentations are only counted: one marker for the count.
        counted = (f"{event.count} more presentations refused from {format_time(event.first_at)} "
                   f"to {format_time(event.last_at)}")

        def render(x: float, y: float) -> str:
            return (f'<rect class="verification rejected counted" x="{x - 5}" y="{y - 5}" width="10" '
                    f'height="10" data-kind="verification" data-outcome="rejected" data-count="{event.count}" '
                    f'data-position="{position}">{_title(counted)}</rect>')
        return Mark(0, x, 5, f"{event.count} refused"), render
    if isinstance(event, email.EmailQueued):
        def render(x: float, y: float) -> str:
            return (f'<circle class="queued" cx="{x}" cy="{y}" r="4" data-kind="queued" '
                    f'data-message="{event.message_id}" data-position="{position}">{told("queued", at)}</circle>')
        return Mark(order[event.message_id], x, 4, ""), render  # the lane's name says what was queued
    if isinstance(event, email.ProviderAccepted | email.SendAttemptFailed):
        outcome = LEASE_ENDINGS[type(event)]
        if isinstance(event, email.ProviderAccepted):
            answer = f"accepted by {event.provider}, id {event.provider_message_id}"
            label = f"sent via {event.provider}"
        else:
            answer = label = f"failed: {event.error}"
        worker = attempts[event.lease_token].worker if event.lease_token in attempts else ""

        def render(x: float, y: float) -> str:
            return (f'<path class="attempt {outcome}" d="M{x},{y - 8} l6,8 l-6,8 l-6,-8 z" data-kind="attempt" '
                    f'data-message="{event.message_id}" data-worker="{_attr(worker)}" data-attempt="{event.attempt}" '
                    f'data-outcome="{outcome}" data-position="{position}">'
                    f'{told(f"attempt {event.attempt}: {answer}", at)}</path>')
        return Mark(order[event.message_id], x, 6, label), render
    if isinstance(event, FEEDBACK):
        reported = _feedback_kind(event)

        def render(x: float, y: float) -> str:
            return (f'<circle class="feedback {reported}" cx="{x}" cy="{y}" r="5" data-kind="feedback" '
                    f'data-message="{event.message_id}" data-outcome="{reported}" data-position="{position}">'
                    f'{told(f"{reported} (reported by {event.source})", at)}</circle>')
        return Mark(order[event.message_id], x, 5, reported), render
    if isinstance(event, email.DeliverySkipped | email.DeliveryAbandoned | email.DeliveryRedriven):
        kind = {email.DeliverySkipped: "skipped", email.DeliveryAbandoned: "abandoned",
                email.DeliveryRedriven: "redriven"}[type(event)]
        reason = getattr(event, "reason", None) or getattr(event, "last_error", "")
        label = {"skipped": f"skipped: {reason}", "abandoned": "abandoned", "redriven": "re-driven"}[kind]

        def render(x: float, y: float) -> str:
            return (f'<path class="{kind}" d="M{x - 5},{y - 5} l10,10 m0,-10 l-10,10" data-kind="{kind}" '
                    f'data-message="{event.message_id}" data-outcome="{kind}" data-position="{position}">'
                    f'{told(f"{kind} ({reason})", at)}</path>')
        return Mark(order[event.message_id], x, 5, label), render
    if isinstance(event, LEASE_EVENTS):
        return None  # the lease bars
    # A fact of a kind this picture does not name (added later): a dot, named by its event type.
    message_id = getattr(event, "message_id", None)

    def fact(x: float, y: float) -> str:
        return (f'<circle class="fact" cx="{x}" cy="{y}" r="5" data-kind="fact" data-event="{_attr(r.event_type)}" '
                f'data-position="{position}">{told(r.event_type, at)}</circle>')
    return Mark(order.get(message_id, 0) if isinstance(message_id, UUID) else 0, x, 5, r.event_type), fact


def _label(text: str, x: float, y: float, right: bool, position: int) -> str:
    """A mark's short label, exactly as wide as ``infra.console.marks`` placed it."""
    return (f'<text class="mark-label" x="{x}" y="{y + 3.5}" text-anchor="{"start" if right else "end"}" '
            f'textLength="{label_width(text)}" lengthAdjust="spacingAndGlyphs" data-label-of="{position}">'
            f'{escape(text)}</text>')


def _arc(r: RecordedEvent, at: datetime, scale: _Scale, requests: dict[UUID | None, tuple[float, float]]) -> str:
    """The arc from a superseded request to the one that replaced it."""
    event = r.event
    old, new = _request_id(event), event.superseded_by
    x = scale.x(at)
    (start, start_y), (end, end_y) = requests.get(old, (x, TOP + ARC)), requests.get(new, (x, TOP + ARC))
    # Only a reset request is superseded by no other (a password change): its reason says why.
    by = new if not isinstance(event, reset_events.ResetSuperseded) or new is not None else event.reason
    top = min(start_y, end_y) - 8 - 14
    return (f'<path class="supersession" d="M{start},{start_y - 8} C{start},{top} {end},{top} {end},{end_y - 8}" '
            f'data-kind="supersession" data-request="{old}" data-superseded-by="{new or ""}" '
            f'data-position="{r.global_position}">{_title(f"request {old} superseded by {by} at {format_time(at)}")}'
            f'</path>')


def _request_id(event: object) -> UUID | None:
    return getattr(event, "request_id", None) or getattr(event, "challenge_id", None)


def _axis(scale: _Scale, height: int, requests_y: float) -> list[str]:
    label = "requests"
    lines = [f'<text class="axis-label" x="{LABEL - 8}" y="{requests_y + 4}" text-anchor="end" '
             f'textLength="{label_width(label)}" lengthAdjust="spacingAndGlyphs">{label}</text>']
    for x, anchor, text in scale.ticks():
        lines.append(f'<line class="tick" x1="{x}" y1="{TOP - 10}" x2="{x}" y2="{height}"/>')
        lines.append(f'<text class="axis-label" x="{x}" y="{TOP - 14}" text-anchor="{anchor}" '
                     f'textLength="{label_width(text)}" lengthAdjust="spacingAndGlyphs">{text}</text>')
    for a, b in scale.cuts:
        quiet = after(a, b).removeprefix("+")
        lines.append(f'<rect class="axis-break" x="{scale.x(a) + 4}" y="{TOP - 10}" width="{BREAK - 8}" '
                     f'height="{height - TOP + 10}" data-kind="axis-break" data-seconds="{(b - a).total_seconds()}">'
                     f'{_title(f"{quiet} with nothing drawn, from {format_time(a)} to {format_time(b)}")}</rect>')
    return lines


def _lane_labels(lanes: Iterable[_Lane], lane_y: Callable[[UUID], float]) -> list[str]:
    return [f'<g class="lane" data-message="{found.message_id}"><title>email {found.message_id}</title>'
            f'<line class="lane-line" x1="{LABEL}" y1="{lane_y(found.message_id)}" x2="{WIDTH - RIGHT}" '
            f'y2="{lane_y(found.message_id)}"/>'
            f'<text class="lane-label" x="{LABEL - 8}" y="{lane_y(found.message_id) + 4}" text-anchor="end" '
            f'textLength="{label_width(found.label)}" lengthAdjust="spacingAndGlyphs">'
            f'{escape(found.label)}</text></g>' for found in lanes]


def _lease_bar(lease: _Lease, scale: _Scale, y: float) -> str:
    start, end = scale.x(lease.start), scale.x(lease.end)
    told = (f"lease of {lease.worker}, attempt {lease.attempt}, from {format_time(lease.start)} "
            f"to {format_time(lease.end)}: {lease.outcome}")
    return (f'<rect class="lease {lease.outcome}" x="{start}" y="{y - BAR / 2}" width="{max(end - start, 4.0)}" '
            f'height="{BAR}" rx="3" data-kind="lease" data-message="{lease.message_id}" '
            f'data-worker="{_attr(lease.worker)}" data-attempt="{lease.attempt}" data-outcome="{lease.outcome}" '
            f'data-lease="{lease.token}">{_title(told)}</rect>')


def _feedback_kind(event: email.ProviderDelivered | email.ProviderBounced | email.ProviderComplained) -> str:
    if isinstance(event, email.ProviderBounced):
        return "bounced" if event.permanent else "bounced-transient"
    return "delivered" if isinstance(event, email.ProviderDelivered) else "complained"
