"""Sentences that answer an incident review's questions, from the events alone.

"Why did this user get two emails / no email / a link that did not work?"
``explain_request``, ``explain_message`` and ``explain_user`` fold the
events of a user's requests and their emails into small stories, then tell
each one in log order, for example:

    Reset request A ... was superseded by B at 10:02:11.000+00:00; its link stopped working then.
    Reset request A's email M1 was skipped (superseded) by worker w2 at ...: it was not sent, ...
    Reset request B's email M2 was accepted by provider smtp at ..., id X, on attempt 2 by w3,
    after the lease of w1 expired.

Each sentence is a ``Finding`` that also carries its kind, times and ids,
for tools (``history --json``).

The story itself, one ``Finding`` per event, is folded in ``projections.findings``.

Pure: the caller loads the events; ``now`` says whether an open request has expired.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from uuid import UUID

from domain.log import RecordedEvent
from domain.email import LeaseClaimed, ProviderAccepted, SendAttemptFailed
from domain.outage import ProviderOutageBegan
from domain.webhooks import WebhookQueued, time_of, webhook_stream
from projections.findings import Finding, Request, Story, build_story, email_label, finding_ids, outage_going_on
from projections.timeline import format_time, summary

T = format_time


def _in_log_order(said: Iterable[Finding]) -> list[Finding]:
    return sorted(said, key=lambda f: (f.position if f.position is not None else -1, f.sentence))


def sentences(findings: Iterable[Finding]) -> list[str]:
    return [finding.sentence for finding in findings]


def _still(story: Story, request: Request, now: datetime) -> list[Finding]:
    """What is still going on: mail not sent yet, a request not used yet."""
    lines, rid = [], request.request_id
    for message_id in request.messages:
        message = story.messages.get(message_id)
        if message is None or message.finished:
            continue
        current = message.attempts[-1] if message.attempts else None
        if current is not None and current.ended is None:
            lines.append(Finding(f"{email_label(story, message_id)} is leased to {current.owner} (attempt "
                                 f"{current.number}) with no outcome recorded yet.", "leased-no-outcome", None,
                                 current.claimed_at, finding_ids(request_id=rid, message_id=message_id)))
        elif story.down:
            why = "; ".join(outage_going_on(outage) for outage in story.down)
            lines.append(Finding(f"{email_label(story, message_id)} has not been sent yet (queued at "
                                 f"{T(message.queued_at)}): {why}.", "waiting-for-provider", None,
                                 message.queued_at, finding_ids(request_id=rid, message_id=message_id)))
        else:
            lines.append(Finding(f"{email_label(story, message_id)} has not been sent yet: it is waiting for a worker "
                                 f"(queued at {T(message.queued_at)}).", "waiting-for-worker", None,
                                 message.queued_at, finding_ids(request_id=rid, message_id=message_id)))
    if request.status == "open" and now >= request.expires_at:
        lines.append(Finding(f"{request.kind} {rid} expired unused at {T(request.expires_at)}.", "expired-unused",
                             None, request.expires_at, finding_ids(request_id=rid)))
    elif request.status == "open":
        lines.append(Finding(f"{request.kind} {rid} is still open; its link or code works until "
                             f"{T(request.expires_at)}.", "still-open", None, None, finding_ids(request_id=rid),
                             {"expires_at": request.expires_at}))
    return lines


def request_sentences(story: Story, request_id: UUID, now: datetime, *, follow: bool = True) -> list[Finding]:
    """The request's story in log order, then its successor's (once)."""
    request = story.requests.get(request_id)
    if request is None:
        return [Finding(f"No request or challenge {request_id} is in the log.", "not-found", ids=finding_ids(
            request_id=request_id))]
    said = list(request.said)
    for message_id in request.messages:
        if message_id in story.messages:
            said += story.messages[message_id].said
    positions = [finding.position for finding in said if finding.position is not None]
    if positions:  # an outage began or ended while this request's mail was on its way
        said += [o for o in story.outages
                 if o.position is not None and min(positions) < o.position < max(positions)]
    lines = _in_log_order(said) + _still(story, request, now)
    if follow and request.superseded_by in story.requests:
        lines += request_sentences(story, request.superseded_by, now, follow=False)
    return lines


def request_findings(events: Iterable[RecordedEvent], request_id: UUID, *, now: datetime,
                     down: Iterable[ProviderOutageBegan] = ()) -> list[Finding]:
    """What happened to one request (or OTP challenge), its emails, and the request that replaced it.

    ``down`` are the provider outages going on now: mail still waiting is told as waiting for them.
    """
    return request_sentences(build_story(events, down), request_id, now)


def message_findings(events: Iterable[RecordedEvent], message_id: UUID, *, now: datetime,
                     down: Iterable[ProviderOutageBegan] = ()) -> list[Finding]:
    """What happened to one email, told with the request it served (``down`` as for ``request_findings``)."""
    story = build_story(events, down)
    message = story.messages.get(message_id)
    if message is None:
        return [Finding(f"No email {message_id} is in the log.", "not-found", ids=finding_ids(message_id=message_id))]
    return request_sentences(story, message.request_id, now)


def webhook_findings(events: Iterable[RecordedEvent], delivery_id: UUID) -> list[Finding]:
    """Each attempt of one webhook delivery, in log order: the call, what the endpoint answered, when it retries."""
    lines = []
    for r in events:
        if r.stream_id != webhook_stream(delivery_id):
            continue
        event = r.event
        match event:
            case WebhookQueued():
                sentence = (f"Webhook {event.event_type} ({event.webhook_id}) was queued for endpoint "
                            f"{event.endpoint_id} of tenant {event.tenant}.")
            case LeaseClaimed():
                sentence = f"Attempt {event.attempt}: {event.lease_owner} took it up."
            case SendAttemptFailed(retry_at=None):
                sentence = f"Attempt {event.attempt} failed: {event.error}; no retry."
            case SendAttemptFailed():
                sentence = f"Attempt {event.attempt} failed: {event.error}; retry at {format_time(event.retry_at)}."
            case ProviderAccepted():
                sentence = f"Attempt {event.attempt} delivered: the endpoint answered {event.provider_message_id}."
            case _:
                sentence = summary(event)[:1].upper() + summary(event)[1:] + "."
        lines.append(Finding(sentence, type(event).__name__, r.global_position, time_of(event),
                             ids=finding_ids(message_id=delivery_id)))
    return lines or [Finding(f"No webhook delivery {delivery_id} is in the log.", "not-found",
                             ids=finding_ids(message_id=delivery_id))]


def user_findings(events: Iterable[RecordedEvent], user_id: str, *, now: datetime) -> list[Finding]:
    """Every request of a user, in order, then how many of their emails reached the provider."""
    story = build_story(events)
    lines = _in_log_order(story.user_notes)
    for request_id in story.requests:
        lines += request_sentences(story, request_id, now, follow=False)
    accepted = [m for m in story.messages.values() if m.accepted]
    if len(accepted) > 1:
        message_ids = ",".join(str(m.message_id) for m in accepted)
        lines.append(Finding(f"{len(accepted)} emails to user {user_id} were accepted by the provider: "
                             + "; ".join(email_label(story, m.message_id) for m in accepted) + ".", "several-accepted",
                             ids=finding_ids(user_id=user_id, message_ids=message_ids)))
    return lines


def explain_request(events: Iterable[RecordedEvent], request_id: UUID, *, now: datetime) -> list[str]:
    """The sentences of ``request_findings``."""
    return sentences(request_findings(events, request_id, now=now))


def explain_message(events: Iterable[RecordedEvent], message_id: UUID, *, now: datetime) -> list[str]:
    """The sentences of ``message_findings``."""
    return sentences(message_findings(events, message_id, now=now))


def explain_user(events: Iterable[RecordedEvent], user_id: str, *, now: datetime) -> list[str]:
    """The sentences of ``user_findings``."""
    return sentences(user_findings(events, user_id, now=now))
