"""What each event says about a user's requests and emails, gathered into a ``Story``.

``build_story`` folds the events in log order: every event about a request
(made, superseded, used, refused, a key bound to it) or about one of its
emails (leased, failed, accepted, skipped, re-driven) becomes a ``Finding``,
the sentence that tells it, kept with the request or email it concerns;
refusals, lockouts and erasures are notes about the user, outages notes of
their own. ``projections.explain`` then tells the story: in log order, what
is still going on, and the request that replaced one.

Pure: the caller loads the events.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any
from uuid import UUID

from attrs import define, field, frozen

from domain import counting, email, otp_events, outage, privacy, request_rules, reset_events, suppression
from domain.log import RecordedEvent
from domain.support import SUPPORT_REASON
from domain.tenants import split_scoped_user
from projections.timeline import (
    counted_answer,
    counted_clients,
    erased_keys,
    event_times,
    format_time,
    presented_after,
)

T = format_time


@frozen
class Finding:
    """One sentence of the story, with what it is made of."""

    sentence: str
    # The type of the event it tells (as in the timeline: "ResetSuperseded", "ProviderAccepted", ...), or
    # what is still going on: "still-open", "expired-unused", "waiting-for-worker", "waiting-for-provider",
    # "leased-no-outcome"; or "not-found", "several-accepted".
    kind: str
    position: int | None = None  # the global position of the event it tells; None for what is still going on
    at: datetime | None = None
    ids: dict[str, str] = field(factory=dict)  # request_id, message_id, user_id, ... as text
    times: dict[str, datetime] = field(factory=dict)  # other moments it names: expires_at, retry_at, ...

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "sentence": self.sentence, "position": self.position,
                "at": self.at.isoformat() if self.at else None, **self.ids,
                **{name: moment.isoformat() for name, moment in self.times.items()}}


def finding_ids(**ids: object) -> dict[str, str]:
    return {name: str(value) for name, value in ids.items() if value is not None}


@define
class Attempt:
    number: int
    owner: str
    claimed_at: datetime | None
    ended: str | None = None  # "expired", "released", "failed", or None while the lease stands


@define
class Message:
    message_id: UUID
    template: str
    request_id: UUID
    queued_at: datetime | None
    attempts: list[Attempt] = field(factory=list)
    said: list[Finding] = field(factory=list)
    finished: bool = False
    accepted: bool = False


@define
class Request:
    request_id: UUID
    kind: str  # "Reset request" or "OTP challenge"
    said: list[Finding]
    expires_at: datetime
    messages: list[UUID]
    status: str = "open"
    superseded_by: UUID | None = None


@define
class Story:
    requests: dict[UUID, Request] = field(factory=dict)
    messages: dict[UUID, Message] = field(factory=dict)
    user_notes: list[Finding] = field(factory=list)  # refusals, account lockouts: about the user, not one request
    outages: list[Finding] = field(factory=list)  # provider outages, told beside the mail that waited through them
    # Outages going on now (the caller reads them from the providers' streams): mail still waiting waits for them.
    down: list[outage.ProviderOutageBegan] = field(factory=list)


def _who(r: RecordedEvent) -> str:
    metadata = r.metadata or {}
    actor, client = metadata.get("actor"), metadata.get("client")
    parts = [str(actor)] if actor else []
    if client and client not in str(actor):
        parts.append(f"client {client}")
    return " via ".join(parts) if parts else "an unrecorded caller"


def _on_behalf(r: RecordedEvent) -> str:
    """A request support made for the user: said so, with their reason (``domain.support``); else nothing."""
    reason = (r.metadata or {}).get(SUPPORT_REASON)
    return f" Support sent it on the user's behalf because {reason}." if reason else ""


def email_label(story: Story, message_id: UUID) -> str:
    message = story.messages.get(message_id)
    if message is None:
        return f"Email {message_id}"
    request = story.requests.get(message.request_id)
    owner = f"{request.kind} {message.request_id}" if request else f"Request {message.request_id}"
    notice = "" if message.template in ("reset_link", "otp_code") else f" ({message.template.replace('_', ' ')} notice)"
    return f"{owner}'s email {message_id}{notice}"


def _request_event(story: Story, r: RecordedEvent, at: datetime | None) -> None:
    e, pos = r.event, r.global_position
    match e:
        case reset_events.ResetRequested() | otp_events.OtpChallengeIssued():
            rid = e.request_id if isinstance(e, reset_events.ResetRequested) else e.challenge_id
            kind = "Reset request" if isinstance(e, reset_events.ResetRequested) else "OTP challenge"
            user_id = split_scoped_user(e.user_id)[1]  # as the tenant knows them
            made = (f"{kind} {rid} for user {user_id} was made at {T(at)} by {_who(r)}, valid until "
                    f"{T(e.expires_at)} (key {e.key_id}).{_on_behalf(r)}")
            found = Finding(made, r.event_type, pos, at, finding_ids(request_id=rid, user_id=user_id,
                            message_id=e.message_id), {"expires_at": e.expires_at})
            story.requests[rid] = Request(rid, kind, [found], e.expires_at, [e.message_id])
        case reset_events.ResetSuperseded() | otp_events.OtpChallengeSuperseded():
            rid = e.request_id if isinstance(e, reset_events.ResetSuperseded) else e.challenge_id
            request = story.requests.get(rid)
            if request is None:
                return
            request.status, request.superseded_by = "superseded", e.superseded_by
            why = (f"by {e.superseded_by}" if e.superseded_by is not None
                   else "because the password was changed with another request's link")
            request.said.append(Finding(f"{request.kind} {rid} was superseded {why} at {T(at)}; its link or code "
                                        "stopped working then.", r.event_type, pos, at,
                                        finding_ids(request_id=rid, superseded_by=e.superseded_by)))
        case reset_events.ResetInvalidated() | otp_events.OtpChallengeInvalidated():
            rid = e.request_id if isinstance(e, reset_events.ResetInvalidated) else e.challenge_id
            request = story.requests.get(rid)
            if request is None:
                return
            request.status = "invalidated"
            request.said.append(Finding(f"{request.kind} {rid} was invalidated by support ({_who(r)}) at {T(at)} "
                                        f"because {e.reason}; its link or code stopped working then, and its email "
                                        "is not sent if it was still waiting.", r.event_type, pos, at,
                                        finding_ids(request_id=rid)))
        case reset_events.ResetCompleted() if e.request_id in story.requests:
            request = story.requests[e.request_id]
            request.status = "completed"
            request.messages.append(e.notice_message_id)
            request.said.append(Finding(f"Reset request {e.request_id}'s link was used at {T(at)} by {_who(r)}: "
                                        "the password was changed, and a password-changed notice was queued.",
                                        r.event_type, pos, at,
                                        finding_ids(request_id=e.request_id, notice_message_id=e.notice_message_id)))
        case otp_events.OtpChallengeVerified() | otp_events.OtpChallengeLockedOut() if e.challenge_id in story.requests:
            request = story.requests[e.challenge_id]
            if isinstance(e, otp_events.OtpChallengeVerified):
                request.status, what = "verified", "its code was verified"
            else:
                request.status, what = "locked", f"it was locked ({e.scope})"
            request.said.append(Finding(f"OTP challenge {e.challenge_id}: {what} at {T(at)}.",
                                        r.event_type, pos, at, finding_ids(request_id=e.challenge_id)))
        case reset_events.ResetTokenRejected() | otp_events.OtpCodeRejected():
            rid = e.request_id if isinstance(e, reset_events.ResetTokenRejected) else e.challenge_id
            what = "link" if isinstance(e, reset_events.ResetTokenRejected) else "code"
            request = story.requests.get(rid)
            kind = "reset request" if what == "link" else "OTP challenge"
            said = Finding(f"The {what} of {kind} {rid} was presented again at {T(at)} by {_who(r)} after "
                           f"it was {presented_after(e.reason)}; it was refused.", r.event_type, pos, at,
                           finding_ids(request_id=rid), {})
            (request.said if request is not None else story.user_notes).append(said)
        case otp_events.OtpVerificationFailed() if e.challenge_id in story.requests:
            request = story.requests[e.challenge_id]
            wrong = (f"OTP challenge {e.challenge_id}: a wrong code was entered at {T(at)} by {_who(r)} (wrong code "
                     f"{e.attempt} on this challenge, {e.consecutive_failures} in a row for the account).")
            request.said.append(Finding(wrong, r.event_type, pos, at, finding_ids(request_id=e.challenge_id)))
        case otp_events.OtpChallengeLockedOut():
            until = f" until {T(e.until)}" if e.until else ""
            story.user_notes.append(Finding(f"One-time codes were locked for the whole account at {T(at)}{until}.",
                                            r.event_type, pos, at, finding_ids(request_id=e.challenge_id),
                                            {"until": e.until} if e.until else {}))
        case reset_events.ResetRequestRefused() | otp_events.OtpRequestRefused():
            flow = "reset" if isinstance(e, reset_events.ResetRequestRefused) else "one-time code"
            story.user_notes.append(Finding(f"A {flow} request by {_who(r)} was refused at {T(at)} ({e.reason}): no "
                                            f"email was queued; a new request is accepted from {T(e.retry_at)}.",
                                            r.event_type, pos, at, {}, {"retry_at": e.retry_at}))
        case counting.RequestsCounted(answer="rejected"):
            what = "reset links" if e.flow == "reset" else "one-time codes"
            story.user_notes.append(Finding(f"{e.count} further presentations of {what} no longer usable were "
                                            f"refused between {T(e.first_at)} and {T(e.last_at)}, by "
                                            f"{counted_clients(e)}: counted in one line rather than logged one by one.",
                                            r.event_type, pos, at, {}, {"first_at": e.first_at, "last_at": e.last_at}))
        case counting.RequestsCounted():
            flow = "reset" if e.flow == "reset" else "one-time code"
            story.user_notes.append(Finding(f"{e.count} further {flow} requests were {counted_answer(e)} between "
                                            f"{T(e.first_at)} and {T(e.last_at)}, by {counted_clients(e)}: counted "
                                            "in one line rather than logged one by one; no email was queued.",
                                            r.event_type, pos, at, {}, {"first_at": e.first_at, "last_at": e.last_at}))
        case request_rules.IdempotencyKeyBound() if e.request_id in story.requests:
            request = story.requests[e.request_id]
            request.said.append(Finding(f"A repeat with idempotency key {e.idempotency_key!r} at {T(at)} was answered "
                                        f"with {request.kind.lower()} {e.request_id}; no new email was queued.",
                                        r.event_type, pos, at, finding_ids(request_id=e.request_id)))
        case privacy.SubjectErased():
            story.user_notes.append(Finding(_erasure(e, r, at), r.event_type, pos, at, finding_ids(user_id=e.user_id)))
        case suppression.SuppressionLifted():
            user_id = split_scoped_user(e.user_id)[1]
            story.user_notes.append(Finding(
                f"The suppression of an address of user {user_id} was lifted by {e.actor} at {T(at)} (reason: "
                f"{e.reason}): mail to it is sent again.", r.event_type, pos, at, finding_ids(user_id=user_id)))


def _erasure(e: privacy.SubjectErased, r: RecordedEvent, at: datetime | None) -> str:
    """Ids and times only: the sentence names no address, it says that the addresses are gone."""
    why = f" (reason: {e.reason})" if e.reason else ""
    said = f"User {e.user_id}'s personal data was erased at {T(at)} by {_who(r)}{why}: {erased_keys(e)}."
    if not e.key_ids:
        return said
    return (f"{said} From then on their email addresses in the log read [erased] wherever they are opened, and an "
            "email still queued for them is skipped, not sent; ids, times and who did what stay in the log.")


def _email_event(story: Story, r: RecordedEvent, at: datetime | None) -> None:
    e, pos = r.event, r.global_position
    if isinstance(e, email.EmailQueued):
        story.messages[e.message_id] = Message(e.message_id, e.template, e.request_id, at)
        return
    message = story.messages.get(e.message_id)
    if message is None:
        return
    label, current = email_label(story, e.message_id), message.attempts[-1] if message.attempts else None
    told = feedback_sentence(e, label, at)
    if told is not None:  # what the provider said later: it ends no attempt
        message.said.append(Finding(told, r.event_type, pos, at, finding_ids(request_id=message.request_id,
                                                                         message_id=e.message_id)))
        return
    by = f" by {current.owner}" if current is not None else ""
    match e:
        case email.LeaseClaimed():
            message.attempts.append(Attempt(e.attempt, e.lease_owner, at))
            return
        case email.LeaseExpired():
            taken = f" (attempt {current.number}, taken at {T(current.claimed_at)})" if current is not None else ""
            said = (f"{label}: the lease of {e.lease_owner}{taken} was found expired at {T(at)} with no outcome "
                    "recorded: that worker stopped mid-delivery and may already have handed the email to the "
                    "provider. The retry reuses the message id as idempotency key and Message-ID header: a "
                    "provider that honours it sends one email; one that does not (plain SMTP) may deliver two, "
                    "and is not sent a third time.")
            ended = "expired"
        case email.LeaseReleased(attempt_returned=True):
            said = (f"{label} was given back unsent by {e.lease_owner} at {T(at)}: its provider was down, so the "
                    "attempt was not counted.")
            ended = "released"
        case email.LeaseReleased():
            said, ended = f"{label} was given back by {e.lease_owner} at {T(at)} (worker stopping).", "released"
        case email.SendAttemptFailed(retry_at=None, retryable=True):
            said = f"{label}: attempt {e.attempt}{by} failed at {T(at)}: {e.error}; that was the last attempt allowed."
            ended = "failed"
        case email.SendAttemptFailed(retry_at=None):
            said = (f"{label}: attempt {e.attempt}{by} failed for good at {T(at)}: {e.error} (the provider refused "
                    "it permanently); it was not sent.")
            ended, message.finished = "failed", True
        case email.SendAttemptFailed():
            unknown = " (the provider may have received it)" if e.outcome_unknown else ""
            said = (f"{label}: attempt {e.attempt}{by} failed at {T(at)}: {e.error}{unknown}; retry due at "
                    f"{T(e.retry_at)}.")
            ended = "failed"
        case email.ProviderAccepted():
            expired = [a.owner for a in message.attempts[:-1] if a.ended == "expired"]
            after = f", after the lease of {expired[-1]} expired" if expired else ""
            written_in = f" It was written in {e.locale}." if e.locale else ""
            said = (f"{label} was accepted by provider {e.provider} at {T(at)}, id {e.provider_message_id}, on "
                    f"attempt {e.attempt}{by}{after}.{written_in}")
            if e.settings_version is not None:
                said += f" It was rendered with tenant settings version {e.settings_version}."
            ended, message.finished, message.accepted = "sent", True, True
        case email.DeliverySkipped():
            worker = (r.metadata or {}).get("actor") or "a worker"
            why = {"erased": "its recipient's personal data had been erased",
                   "invalidated": "support had withdrawn its link or code"}.get(
                e.reason, "it was no longer wanted when a worker picked it up")
            said = f"{label} was skipped ({e.reason}) by worker {worker} at {T(at)}: it was not sent, because {why}."
            ended, message.finished = "skipped", True
        case email.DeliveryAbandoned():
            said = (f"{label} was abandoned at {T(at)} after {e.attempts} attempts (last error: {e.last_error}): "
                    "it was not sent.")
            ended, message.finished = "abandoned", True
        case email.DeliveryOutcomeUnknown():
            said = (f"{label} was not sent again at {T(at)}: {e.unknown_outcomes} attempts may have reached the "
                    f"provider without an answer (last: {e.last_error}), and the provider cannot drop a repeat, so "
                    "another attempt could only be another copy. Whether the user received it is unknown: ask "
                    "them, or check the relay's log for its Message-ID, and re-drive it if it never arrived.")
            ended, message.finished = "unknown", True
        case email.DeliveryRedriven():
            said = (f"{label} was re-driven by {e.actor} at {T(at)} ({e.reason}): it was queued again, due at once, "
                    "its attempts counting from one; the worker still checks that it is wanted before sending.")
            ended, message.finished = "redriven", False
        case _:
            return
    if current is not None and current.ended is None:
        current.ended = ended
    message.said.append(Finding(said, r.event_type, pos, at, finding_ids(request_id=message.request_id,
                                                                   message_id=e.message_id)))


def feedback_sentence(e: object, label: str, at: datetime | None) -> str | None:
    """What the provider reported about an email after accepting it, and the suppression that followed."""
    via = {"generic": "the provider", "smtp": "a bounce report (RFC 3464) in the bounce mailbox"}
    match e:
        case email.ProviderDelivered():
            return f"{label} was delivered to the recipient's mail server at {T(at)}, as {_source(e.source)} reported."
        case email.ProviderBounced(permanent=True):
            return (f"{label} bounced for good at {T(at)}, as {via.get(e.source, _source(e.source))} reported: "
                    f"{e.diagnostic or 'no diagnostic given'}. The address will not take mail.")
        case email.ProviderBounced():
            return (f"{label} bounced for now at {T(at)} (a transient failure), as "
                    f"{via.get(e.source, _source(e.source))} reported: {e.diagnostic or 'no diagnostic given'}.")
        case email.ProviderComplained():
            return f"{label}'s recipient marked it as spam at {T(at)}, as {_source(e.source)} reported."
        case suppression.AddressSuppressed():
            why = "bounced for good" if e.reason == "bounce" else "its recipient complained"
            return (f"Because {label} {why}, its address was put on the tenant's suppression list at {T(at)}: "
                    "further resets and codes to it are refused (address_suppressed) until an admin lifts it.")
    return None


def _source(source: str) -> str:
    return {"postmark": "Postmark's webhook", "sendgrid": "SendGrid's event webhook",
            "smtp": "a bounce report"}.get(source, "the provider")


def outage_sentence(event: outage.ProviderOutageBegan | outage.ProviderOutageEnded) -> str:
    """What a reviewer reads about a provider outage: why mail queued meanwhile waited."""
    if isinstance(event, outage.ProviderOutageBegan):
        return (f"Provider {event.provider} was recognised as down by worker {event.worker} at {T(event.began_at)}, "
                f"after {event.failures} different emails failed in a row (last error: {event.last_error}); that "
                "worker stopped claiming mail and probed with one email at a time, without counting attempts.")
    return (f"Provider {event.provider} answered worker {event.worker} again at {T(event.ended_at)}, ending the "
            f"outage that began at {T(event.began_at)}; mail held back meanwhile was sent from then on.")


def outage_going_on(event: outage.ProviderOutageBegan) -> str:
    """Why mail waits while ``event``'s outage goes on, where an operator would otherwise blame the workers."""
    error = f"; last error: {event.last_error}" if event.last_error else ""
    return (f"provider {event.provider} is down since {T(event.began_at)} (recorded by worker {event.worker} after "
            f"{event.failures} emails failed in a row{error}): workers hold mail back and probe the provider with "
            "one email at a time, and send the rest once it answers")


def build_story(events: Iterable[RecordedEvent], down: Iterable[outage.ProviderOutageBegan] = ()) -> Story:
    events = sorted(events, key=lambda r: r.global_position)
    times, story = event_times(events), Story(down=list(down))
    for r in events:
        if isinstance(r.event, (outage.ProviderOutageBegan, outage.ProviderOutageEnded)):
            story.outages.append(Finding(outage_sentence(r.event), r.event_type, r.global_position,
                                         times[r.global_position]))
            continue
        fold = _email_event if r.stream_id.startswith("email:") else _request_event
        fold(story, r, times[r.global_position])
    return story
