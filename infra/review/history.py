"""`history` and `explain`: finding the events about a user, request or message, then telling them.

Look-ups go through ``audit_index`` (a catch-up projection), and the events
it has not indexed yet, after its checkpoint, are read from the log and
matched with the same pure ``entries_of``: the answer is complete even when
the index lags, and says by how much. Everything is read in one
repeatable-read snapshot, so the index and the log agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any
from uuid import UUID

from attrs import frozen
from sqlalchemy import Connection, Engine, text

from domain.email import EmailQueued
from domain.otp import OtpChallengeSuperseded
from domain.privacy import subject_stream
from domain.reset import ResetSuperseded
from domain.errors import NotFound
from domain.log import RecordedEvent
from infra.projector.catchup import read_checkpoint
from infra.eventlog.reader import COMMITTED, pages, read_positions
from projections.audit_index import entries_of, user_of_stream
from projections.explain import explain_message, explain_request, explain_user
from projections.timeline import TimelineEntry, timeline
from projections.timeline import render as render_timeline

INDEXED = text("SELECT global_position FROM audit_index WHERE kind = :kind AND value = ANY(:values)")
MESSAGE_FIELDS = ("message_id", "notice_message_id")


class AuditLookup:
    """Events naming a user, recipient, request or message: the index, plus the log after its checkpoint."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        stored = read_checkpoint(connection, "audit_index")
        self.tail = [r for page in pages(connection, stored.checkpoint, COMMITTED) for r in page]

    @property
    def unindexed(self) -> int:
        return len(self.tail)

    def find(self, kind: str, values: Iterable[str]) -> list[RecordedEvent]:
        values = sorted(set(values))
        if not values:
            return []
        positions = list(self.connection.execute(INDEXED, {"kind": kind, "values": values}).scalars())
        found = read_positions(self.connection, positions)
        found += [r for r in self.tail if any(e.kind == kind and e.value in values for e in entries_of(r))]
        return sorted({r.global_position: r for r in found}.values(), key=lambda r: r.global_position)


def _flow_of(events: list[RecordedEvent]) -> dict[str, str]:
    """Stream id -> "reset" or "otp", for user streams and the email streams they queued."""
    flows = {r.stream_id: r.stream_id.split("-user:")[0] for r in events if user_of_stream(r.stream_id)}
    flows.update({r.stream_id: r.event.flow for r in events if isinstance(r.event, EmailQueued)})
    return flows


def user_events(lookup: AuditLookup, user_id: str, flow: str | None = None) -> list[RecordedEvent]:
    """The user's own streams, the email streams of the messages they queued, and their erasure.

    An erasure is about the user, not one flow: it goes with the events of whichever flow is asked for.
    """
    subject = subject_stream(user_id)
    named = [r for r in lookup.find("user", [user_id])
             if user_of_stream(r.stream_id) == user_id or r.stream_id.startswith("email:") or r.stream_id == subject]
    messages = {str(getattr(r.event, f)) for r in named for f in MESSAGE_FIELDS if getattr(r.event, f, None)}
    events = sorted({r.global_position: r for r in named + lookup.find("message", messages)}.values(),
                    key=lambda r: r.global_position)
    if flow is None:
        return events
    flows = _flow_of(events)
    in_flow = {r.global_position for r in events if flows.get(r.stream_id) == flow}
    return [r for r in events if r.global_position in in_flow or r.stream_id == subject] if in_flow else []


@frozen
class Review:
    subject: str
    findings: list[str]
    timeline: list[TimelineEntry]
    unindexed_events: int  # how far audit_index lagged: those events were read from the log instead

    def render(self) -> str:
        lines = [f"What happened to {self.subject} (times in UTC):"] + [f"  {line}" for line in self.findings]
        if self.unindexed_events:
            lines.append(f"  (audit_index is {self.unindexed_events} events behind the log: those were read "
                         "from the log directly)")
        return "\n".join([*lines, "", render_timeline(self.timeline)])

    def as_dict(self) -> dict[str, Any]:
        return {"subject": self.subject, "findings": self.findings, "unindexed_events": self.unindexed_events,
                "timeline": [entry.as_dict() for entry in self.timeline]}


def _snapshot(engine: Engine) -> Any:
    return engine.connect().execution_options(isolation_level="REPEATABLE READ")


def _until(events: list[RecordedEvent], as_of: datetime | None) -> list[RecordedEvent]:
    return [r for r in events if as_of is None or (r.recorded_at is not None and r.recorded_at <= as_of)]


def history(engine: Engine, user_id: str, *, flow: str | None = None, as_of: datetime | None = None,
            now: datetime) -> Review:
    """Everything about one user (one flow, or both), as it stood at ``as_of`` if given."""
    with _snapshot(engine) as connection:
        lookup = AuditLookup(connection)
        events = _until(user_events(lookup, user_id, flow), as_of)
    if not events:
        raise NotFound(f"no events about user {user_id!r}" + (f" in the {flow} flow" if flow else ""))
    findings = explain_user(events, user_id, now=as_of or now)
    return Review(f"user {user_id}", findings, timeline(events), lookup.unindexed)


def _context(lookup: AuditLookup, kind: str, value: UUID) -> list[RecordedEvent]:
    """All events of the user and flow that ``value`` belongs to."""
    hits = lookup.find(kind, [str(value)])
    if not hits:
        raise NotFound(f"no {kind} {value} in the log")
    queued = next((r.event for r in hits if isinstance(r.event, EmailQueued)), None)
    owner = next((user_of_stream(r.stream_id) for r in hits if user_of_stream(r.stream_id)), None)
    user_id = owner or (queued.user_id if queued else None)
    flows = _flow_of(hits)
    flow = next(iter(flows.values()), None)
    return user_events(lookup, user_id, flow) if user_id is not None else hits


def explain(engine: Engine, *, request_id: UUID | None = None, message_id: UUID | None = None,
            now: datetime) -> Review:
    """Why a request's link worked or not, and what happened to its emails; or one email's story."""
    with _snapshot(engine) as connection:
        lookup = AuditLookup(connection)
        if request_id is not None:
            events = _context(lookup, "request", request_id)
            findings, subject = explain_request(events, request_id, now=now), f"request {request_id}"
        elif message_id is not None:
            events = _context(lookup, "message", message_id)
            findings, subject = explain_message(events, message_id, now=now), f"message {message_id}"
        else:
            raise ValueError("explain needs a request id or a message id")
    focus = _focus(events, request_id, message_id)
    entries = [e for e in timeline(events) if e.request_id in focus]
    return Review(subject, findings, entries, lookup.unindexed)


def _focus(events: list[RecordedEvent], request_id: UUID | None, message_id: UUID | None) -> set[UUID]:
    """The request explained (or the one the message served) and the request that superseded it."""
    if request_id is None:
        request_id = next((r.event.request_id for r in events
                           if isinstance(r.event, EmailQueued) and r.event.message_id == message_id), None)
    focus = {request_id} if request_id is not None else set()
    for r in events:
        if isinstance(r.event, ResetSuperseded | OtpChallengeSuperseded) and r.event.superseded_by is not None:
            superseded = getattr(r.event, "request_id", None) or getattr(r.event, "challenge_id", None)
            if superseded == request_id:
                focus.add(r.event.superseded_by)
    return focus
