"""`history` and `explain`: the events ``infra.review.lookup`` finds about a user, request or message, told.

The answer is complete even when ``audit_index`` lags, and says by how much.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from attrs import frozen
from sqlalchemy import Engine

from domain.input_checks import check_text
from domain.errors import NotFound
from domain.log import RecordedEvent
from domain.tenants import DEFAULT_TENANT, scoped_user
from domain.webhooks import WebhookQueued, webhook_stream
from infra.config.settings import PROVIDERS
from infra.db.replica import ReplicaLag
from infra.eventlog.outages import open_outages
from infra.review.lookup import Lookup, about_message, about_request, about_user, looking_up, of_tenant
from projections.explain import message_findings, request_findings, user_findings, webhook_findings
from projections.findings import Finding
from projections.timeline import TimelineEntry, timeline
from projections.timeline import render as render_timeline


@frozen
class Review:
    subject: str
    findings: list[Finding]
    timeline: list[TimelineEntry]
    unindexed_events: int  # how far audit_index lagged: those events were read from the log instead
    replica: ReplicaLag | None = None  # read from the read replica, this far behind; None: from the primary

    def render(self) -> str:
        lines = [f"What happened to {self.subject} (times in UTC):"] + [f"  {f.sentence}" for f in self.findings]
        if self.unindexed_events:
            lines.append(f"  (audit_index is {self.unindexed_events} events behind the log: those were read "
                         "from the log directly)")
        if self.replica is not None:
            lines.append(f"  ({self.replica.sentence()})")
        return "\n".join([*lines, "", render_timeline(self.timeline)])

    def as_dict(self) -> dict[str, Any]:
        answer = {"subject": self.subject, "findings": [f.as_dict() for f in self.findings],
                  "unindexed_events": self.unindexed_events,
                  "timeline": [entry.as_dict() for entry in self.timeline]}
        return answer if self.replica is None else {**answer, "replica": self.replica.as_json()}


def _until(events: list[RecordedEvent], as_of: datetime | None) -> list[RecordedEvent]:
    return [r for r in events if as_of is None or (r.recorded_at is not None and r.recorded_at <= as_of)]


def _of(tenant: str) -> str:
    return "" if tenant == DEFAULT_TENANT else f" of tenant {tenant}"


def history(engine: Engine, user_id: str, *, tenant: str = DEFAULT_TENANT, flow: str | None = None,
            as_of: datetime | None = None, now: datetime) -> Review:
    """Everything about one user of ``tenant`` (one flow, or both), as it stood at ``as_of`` if given."""
    return history_and_events(engine, user_id, tenant=tenant, flow=flow, as_of=as_of, now=now)[0]


def history_and_events(engine: Engine, user_id: str, *, tenant: str = DEFAULT_TENANT, flow: str | None = None,
                       as_of: datetime | None = None, now: datetime) -> tuple[Review, list[RecordedEvent]]:
    """``history``, and the events it was told from (the console draws them): one read of the lookup."""
    # A well-formed id holds no space, so it can never name another tenant's scoped id.
    check_text("user_id", user_id, max_length=200)
    with looking_up(engine) as lookup:
        events = _until(about_user(lookup, scoped_user(tenant, user_id), flow), as_of)
    if not events:
        raise NotFound(f"no events about user {user_id!r}{_of(tenant)}" + (f" in the {flow} flow" if flow else ""))
    findings = user_findings(events, user_id, now=as_of or now)
    return Review(f"user {user_id}{_of(tenant)}", findings, timeline(events), lookup.unindexed,
                   lookup.replica), events


def _webhook_delivery(lookup: Lookup, delivery_id: UUID, tenant: str) -> tuple[Review, list[RecordedEvent]] | None:
    """A webhook delivery's attempts and events, when ``delivery_id`` is one of ``tenant``; None otherwise."""
    # Asked for the tenant, as every look-up is: another tenant's id costs what an unknown one does.
    hits = [r for r in lookup.find("message", [str(delivery_id)], tenant=tenant)
            if r.stream_id == webhook_stream(delivery_id)]
    if not any(isinstance(r.event, WebhookQueued) for r in hits):
        return None
    review = Review(f"webhook delivery {delivery_id}", webhook_findings(hits, delivery_id), timeline(hits),
                    lookup.unindexed)
    return review, hits


def explain_delivery(engine: Engine, delivery_id: UUID, *, tenant: str = DEFAULT_TENANT
                     ) -> tuple[Review, list[RecordedEvent]] | None:
    """One webhook delivery's story and its events (for the console's case page); None if it is none of ``tenant``'s."""
    with looking_up(engine) as lookup:
        return _webhook_delivery(lookup, delivery_id, tenant)


def explain(engine: Engine, *, request_id: UUID | None = None, message_id: UUID | None = None,
            tenant: str = DEFAULT_TENANT, now: datetime) -> Review:
    """Why a request's link worked or not, and what happened to its emails; or one email's story.

    The sentences are told from every event of the user's flow; the timeline
    shows the events ``lookup`` says are about the request or message. A
    request or email of another tenant than ``tenant`` is not in the log for it.
    """
    with looking_up(engine) as lookup:
        if message_id is not None and (delivery := _webhook_delivery(lookup, message_id, tenant)) is not None:
            return delivery[0]
        down = open_outages(lookup.connection, PROVIDERS)
        if request_id is not None:
            story, kind, value = about_request(lookup, request_id, tenant), "request", request_id
        elif message_id is not None:
            story, kind, value = about_message(lookup, message_id, tenant), "message", message_id
        else:
            raise ValueError("explain needs a request id or a message id")
    story = of_tenant(story, tenant)
    if story is None:
        raise NotFound(f"no {kind} {value} in the log")
    if request_id is not None:
        findings = request_findings(story.context, request_id, now=now, down=down)
    else:
        assert message_id is not None  # one of the two was given, or explain raised above
        findings = message_findings(story.context, message_id, now=now, down=down)
    about = {r.global_position for r in story.events}
    # Timed over the whole context: a supersession takes its time from the request in its transaction.
    entries = [e for e in timeline(story.context) if e.global_position in about]
    return Review(f"{kind} {value}", findings, entries, lookup.unindexed, lookup.replica)
