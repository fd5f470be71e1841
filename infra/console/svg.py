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
- the erasure, a line across every lane.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from html import escape
from uuid import UUID

from attrs import define, field

from domain import counting, email, otp_events, privacy, reset_events
from domain.log import RecordedEvent
from projections.timeline import event_times, format_time

WIDTH = 960
LABEL = 190  # the lanes' names, left of the axis
RIGHT = 20
LANE = 44
TOP = 34  # room for the axis' labels
BAR = 14

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
    marks: list[str] = field(factory=list)


class _Scale:
    """Time -> x, over the case's span (at least one second, so a single moment still has a place)."""

    def __init__(self, moments: Iterable[datetime]) -> None:
        moments = sorted(moments)
        self.start = moments[0] if moments else datetime.fromtimestamp(0).astimezone()
        end = moments[-1] if moments else self.start
        self.span = max((end - self.start).total_seconds(), 1.0)

    def x(self, moment: datetime) -> float:
        return round(LABEL + (moment - self.start).total_seconds() / self.span * (WIDTH - LABEL - RIGHT), 1)

    def ticks(self) -> list[tuple[float, str]]:
        steps = 4
        return [(self.x(self.start + timedelta(seconds=self.span * i / steps)),
                 format_time(self.start + timedelta(seconds=self.span * i / steps))[11:19]) for i in range(steps + 1)]


def _title(text: str) -> str:
    return f"<title>{escape(text)}</title>"


def draw(events: list[RecordedEvent]) -> str:
    """One SVG picture of these events (any order): lanes, lease bars, attempts, supersessions, the erasure."""
    events = sorted(events, key=lambda r: r.global_position)
    times = event_times(events)
    when = {r.global_position: at for r in events if (at := times[r.global_position]) is not None}
    lanes: dict[UUID, _Lane] = {}
    leases: dict[UUID, _Lease] = {}

    def lane(message_id: UUID) -> _Lane:
        return lanes.setdefault(message_id, _Lane(message_id, f"email {_short(message_id)}"))

    for r in events:
        event, at = r.event, when.get(r.global_position)
        if at is None:
            continue
        if isinstance(event, email.EmailQueued):
            found = lane(event.message_id)
            found.label, found.queued_at = f"{event.template} {_short(event.message_id)}", at
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
    order = {message_id: index for index, message_id in enumerate(lanes)}
    attempts = {lease.token: lease for found in lanes.values() for lease in found.leases}

    def lane_y(message_id: UUID) -> float:
        return TOP + LANE * (1 + order[message_id])

    shapes: list[str] = []
    # Where each request sits, before the links are drawn: a supersession precedes its replacement in the log.
    request_x = {_request_id(r.event): scale.x(when[r.global_position]) for r in events
                 if isinstance(r.event, REQUESTS) and r.global_position in when}
    request_lane = TOP + BAR
    for r in events:
        event, at = r.event, when.get(r.global_position)
        if at is None:
            continue
        x, position = scale.x(at), r.global_position
        if isinstance(event, REQUESTS):
            request_id = _request_id(event)
            shapes.append(
                f'<circle class="request" cx="{x}" cy="{request_lane}" r="6" data-kind="request" '
                f'data-request="{request_id}" data-message="{event.message_id}" data-position="{position}">'
                f'{_title(f"{r.event_type} {request_id} at {format_time(at)}")}</circle>')
        elif isinstance(event, SUPERSESSIONS):
            old = _request_id(event)
            new = event.superseded_by
            start = request_x.get(old, x)
            end = request_x.get(new, x) if new is not None else x
            # Only a reset request is superseded by no other (a password change): its reason says why.
            by = new if not isinstance(event, reset_events.ResetSuperseded) or new is not None else event.reason
            shapes.append(
                f'<path class="supersession" d="M{start},{request_lane - 8} C{start},{request_lane - 22} '
                f'{end},{request_lane - 22} {end},{request_lane - 8}" data-kind="supersession" '
                f'data-request="{old}" data-superseded-by="{new or ""}" data-position="{position}">'
                f'{_title(f"request {old} superseded by {by} at {format_time(at)}")}</path>')
        elif type(event) in VERIFICATIONS:
            outcome = VERIFICATIONS[type(event)]
            request_id = _request_id(event)
            reason = getattr(event, "reason", None) if outcome == "rejected" else None
            told = f"{r.event_type} ({reason})" if reason else r.event_type
            shapes.append(
                f'<rect class="verification {outcome}" x="{x - 5}" y="{request_lane - 5}" width="10" height="10" '
                f'data-kind="verification" data-outcome="{outcome}" data-request="{request_id or ""}" '
                + (f'data-reason="{_attr(reason)}" ' if reason else "")
                + f'data-position="{position}">{_title(f"{told} at {format_time(at)}")}</rect>')
        elif isinstance(event, counting.RequestsCounted) and event.answer == "rejected":
            # Past the per-window bound, rejected presentations are only counted: one marker for the count.
            told = (f"{event.count} more presentations refused from {format_time(event.first_at)} "
                    f"to {format_time(event.last_at)}")
            shapes.append(
                f'<rect class="verification rejected counted" x="{x - 5}" y="{request_lane - 5}" width="10" '
                f'height="10" data-kind="verification" data-outcome="rejected" data-count="{event.count}" '
                f'data-position="{position}">{_title(told)}</rect>')
        elif isinstance(event, privacy.SubjectErased):
            bottom = TOP + LANE * (len(lanes) + 1)
            shapes.append(
                f'<line class="erasure" x1="{x}" y1="{TOP - 6}" x2="{x}" y2="{bottom}" data-kind="erasure" '
                f'data-position="{position}">{_title(f"personal data erased at {format_time(at)}")}</line>')
        elif isinstance(event, email.EmailQueued):
            y = lane_y(event.message_id)
            shapes.append(
                f'<circle class="queued" cx="{x}" cy="{y}" r="4" data-kind="queued" data-message="{event.message_id}" '
                f'data-position="{position}">{_title(f"queued at {format_time(at)}")}</circle>')
        elif isinstance(event, email.ProviderAccepted | email.SendAttemptFailed):
            y, outcome = lane_y(event.message_id), LEASE_ENDINGS[type(event)]
            answer = (f"accepted by {event.provider}, id {event.provider_message_id}"
                      if isinstance(event, email.ProviderAccepted) else f"failed: {event.error}")
            worker = attempts[event.lease_token].worker if event.lease_token in attempts else ""
            shapes.append(
                f'<path class="attempt {outcome}" d="M{x},{y - 9} l6,9 l-6,9 l-6,-9 z" data-kind="attempt" '
                f'data-message="{event.message_id}" data-worker="{_attr(worker)}" data-attempt="{event.attempt}" '
                f'data-outcome="{outcome}" data-position="{position}">'
                f'{_title(f"attempt {event.attempt}: {answer} at {format_time(at)}")}</path>')
        elif isinstance(event, FEEDBACK):
            y, kind = lane_y(event.message_id), _feedback_kind(event)
            shapes.append(
                f'<circle class="feedback {kind}" cx="{x}" cy="{y}" r="5" data-kind="feedback" '
                f'data-message="{event.message_id}" data-outcome="{kind}" data-position="{position}">'
                f'{_title(f"{kind} (reported by {event.source}) at {format_time(at)}")}</circle>')
        elif isinstance(event, email.DeliverySkipped | email.DeliveryAbandoned | email.DeliveryRedriven):
            y = lane_y(event.message_id)
            kind = {email.DeliverySkipped: "skipped", email.DeliveryAbandoned: "abandoned",
                    email.DeliveryRedriven: "redriven"}[type(event)]
            reason = getattr(event, "reason", None) or getattr(event, "last_error", "")
            shapes.append(
                f'<path class="{kind}" d="M{x - 5},{y - 5} l10,10 m0,-10 l-10,10" data-kind="{kind}" '
                f'data-message="{event.message_id}" data-outcome="{kind}" data-position="{position}">'
                f'{_title(f"{kind} ({reason}) at {format_time(at)}")}</path>')
    bars = [_lease_bar(lease, scale, lane_y(lease.message_id)) for found in lanes.values() for lease in found.leases]
    height = TOP + LANE * (len(lanes) + 1)
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" role="img" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}" aria-labelledby="timeline-title">',
        '<title id="timeline-title">Timeline of the case: requests, then one lane per email</title>',
        *_axis(scale, height),
        *_lane_labels(lanes.values(), lane_y),
        *bars,
        *shapes,
        "</svg>",
    ])


def _short(message_id: UUID) -> str:
    """The id's last 8 hex digits: enough to tell a case's emails apart (the tooltip has the whole id)."""
    return f"…{message_id.hex[-8:]}"


def _request_id(event: object) -> UUID | None:
    return getattr(event, "request_id", None) or getattr(event, "challenge_id", None)


def _axis(scale: _Scale, height: int) -> list[str]:
    lines = [f'<text class="axis-label" x="{LABEL - 8}" y="{TOP + BAR + 4}" text-anchor="end">requests</text>']
    ticks = scale.ticks()
    for index, (x, label) in enumerate(ticks):
        anchor = "end" if index == len(ticks) - 1 else "middle"  # the last label stays inside the picture
        lines.append(f'<line class="tick" x1="{x}" y1="{TOP - 10}" x2="{x}" y2="{height}"/>')
        lines.append(f'<text class="axis-label" x="{x}" y="{TOP - 14}" text-anchor="{anchor}">{label}</text>')
    return lines


def _lane_labels(lanes: Iterable[_Lane], lane_y: Callable[[UUID], float]) -> list[str]:
    return [f'<g class="lane" data-message="{found.message_id}"><title>email {found.message_id}</title>'
            f'<line class="lane-line" x1="{LABEL}" y1="{lane_y(found.message_id)}" x2="{WIDTH - RIGHT}" '
            f'y2="{lane_y(found.message_id)}"/>'
            f'<text class="lane-label" x="{LABEL - 8}" y="{lane_y(found.message_id) + 4}" text-anchor="end">'
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
