"""The top of a case page: the latest link and code, what was refused or not sent, and the three questions.

Support hears three complaints (docs/incident-review.md): "I got two
emails", "I never got the email", "the link does not work". ``glance``
answers each in one line from the case's events, above the facts they stand
on: the latest link and the latest code (sent when, through which provider,
used or not), the refused presentations, and any email abandoned or bounced.
Times are relative to the case's first request ("+2 min 11 s"); the
sentences of ``explain`` stay below them on the page, with the absolute times,
for the record.

A line is a tuple of parts: text, or an id that the page shortens (with the
whole id on hover and a copy button). ``plain`` reads a line as the page
shows it.

Events this module does not know (facts added later: a bounce, an
invalidation) are not dropped: one about an email is told after the email's
ending (and among the bounced when its type says it is trouble: a bounce, a
complaint), one about a request or challenge ends it under its own event
type.

Pure: the caller passes the lookup's events and ``now``, which says whether an
open request has expired.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from uuid import UUID

from attrs import define, field, frozen

from domain import counting, email, otp_events, reset_events
from domain.log import RecordedEvent
from projections.timeline import event_times

Part = str | UUID
Line = tuple[Part, ...]
# The three complaints, as the page asks them.
TWO_EMAILS, NO_EMAIL, NOT_WORKING = "Two emails?", "No email?", "Link or code not working?"
# Events that only say what the log already tells otherwise (a lease taken, released), or that ``glance``
# reads elsewhere: not "unknown" facts.
QUIET = (email.LeaseClaimed, email.LeaseReleased, email.DeliveryRedriven)
# Which of those later facts about an email (provider feedback, say) count as "bounced", by their event type.
TROUBLE = re.compile(r"Bounce|Complain|Reject|Fail", re.IGNORECASE)


def short_id(value: UUID) -> str:
    """The id's last 8 hex digits, as the page shows it: enough to tell a case's ids apart."""
    return f"…{value.hex[-8:]}"


def plain(line: Line) -> str:
    return "".join(short_id(part) if isinstance(part, UUID) else part for part in line)


def after(anchor: datetime, moment: datetime) -> str:
    """``moment`` relative to ``anchor``: "+0 s", "+45 s", "+2 min", "+2 min 11 s", "+1 h 5 min", "+2 d 3 h"."""
    seconds = int((moment - anchor).total_seconds())
    sign, seconds = ("-", -seconds) if seconds < 0 else ("+", seconds)
    units = [("d", 86400), ("h", 3600), ("min", 60), ("s", 1)]
    for index, (name, size) in enumerate(units):
        if seconds >= size or name == "s":
            big, rest = divmod(seconds, size)
            small_name, small_size = units[min(index + 1, 3)]
            small = rest // small_size
            return f"{sign}{big} {name}" + (f" {small} {small_name}" if small and name != "s" else "")
    raise AssertionError("unreachable")  # pragma: no cover


@define
class _Mail:
    message_id: UUID
    template: str
    queued_at: datetime
    ending: str | None = None  # "accepted", "abandoned", "skipped" or "refused" (a permanent failure)
    ended_at: datetime | None = None
    provider: str = ""
    attempt: int = 0
    detail: str = ""  # why it was skipped, or the last error
    held_by: str | None = None  # the worker holding its lease now
    interrupted: list[str] = field(factory=list)  # the workers whose lease expired mid-send
    later: list[tuple[str, datetime]] = field(factory=list)  # facts of kinds told only by their event type


@define
class _Request:
    request_id: UUID
    thing: str  # "link" or "code"
    made_at: datetime
    expires_at: datetime
    mails: list[UUID]
    ending: str | None = None  # "used", "verified", "locked", "superseded", or an unknown event's type
    ended_at: datetime | None = None
    superseded_by: UUID | None = None
    wrong: int = 0  # wrong codes presented

    @property
    def name(self) -> Line:
        return ("request " if self.thing == "link" else "challenge ", self.request_id)


@frozen
class _Refusal:
    request_id: UUID | None
    thing: str
    reason: str
    at: datetime
    count: int = 1


@frozen
class Glance:
    anchor: datetime | None  # the first request's time: every "+..." counts from it
    facts: list[tuple[str, Line]]  # ("Latest link", ...), ("Refused presentations", ...), ...
    answers: list[tuple[str, Line]]  # one per complaint: TWO_EMAILS, NO_EMAIL, NOT_WORKING


@define
class _Fold:
    requests: dict[UUID, _Request] = field(factory=dict)
    mails: dict[UUID, _Mail] = field(factory=dict)
    refusals: list[_Refusal] = field(factory=list)
    refused_requests: list[tuple[str, str, datetime]] = field(factory=list)  # (link or code, reason, when)

    def take(self, event: object, at: datetime, event_type: str) -> None:
        match event:
            case reset_events.ResetRequested() | otp_events.OtpChallengeIssued():
                rid = _request_of(event)
                assert rid is not None
                thing = "link" if isinstance(event, reset_events.ResetRequested) else "code"
                self.requests[rid] = _Request(rid, thing, at, event.expires_at, [event.message_id])
            case reset_events.ResetSuperseded() | otp_events.OtpChallengeSuperseded():
                self._end(_request_of(event), "superseded", at, event.superseded_by)
            case reset_events.ResetCompleted():
                self._end(event.request_id, "used", at)
            case otp_events.OtpChallengeVerified():
                self._end(event.challenge_id, "verified", at)
            case otp_events.OtpChallengeLockedOut():
                self._end(event.challenge_id, "locked", at)
            case otp_events.OtpVerificationFailed():
                if event.challenge_id in self.requests:
                    self.requests[event.challenge_id].wrong += 1
            case reset_events.ResetTokenRejected() | otp_events.OtpCodeRejected():
                thing = "link" if isinstance(event, reset_events.ResetTokenRejected) else "code"
                self.refusals.append(_Refusal(_request_of(event), thing, event.reason, at))
            case counting.RequestsCounted() if event.answer == "rejected":
                thing = "link" if event.flow == "reset" else "code"
                self.refusals.append(_Refusal(None, thing, "counted", event.last_at, event.count))
            case reset_events.ResetRequestRefused() | otp_events.OtpRequestRefused():
                thing = "link" if isinstance(event, reset_events.ResetRequestRefused) else "code"
                self.refused_requests.append((thing, event.reason, at))
            case email.EmailQueued():
                self.mails[event.message_id] = _Mail(event.message_id, event.template, at)
                if event.request_id in self.requests and event.message_id not in self.requests[event.request_id].mails:
                    self.requests[event.request_id].mails.append(event.message_id)
            case _:
                self._mail_event(event, at, event_type)

    def _mail_event(self, event: object, at: datetime, event_type: str) -> None:
        mail = self.mails.get(getattr(event, "message_id", None))  # type: ignore[arg-type]
        if mail is None:
            request = self.requests.get(_request_of(event))  # type: ignore[arg-type]
            if request is not None and request.ending is None and not isinstance(event, QUIET):
                self._end(request.request_id, event_type, at)  # a fact added later, by its name
            return
        match event:
            case email.LeaseClaimed():
                mail.held_by, mail.attempt = event.lease_owner, event.attempt
            case email.LeaseExpired():
                mail.held_by = None
                mail.interrupted.append(event.lease_owner)
            case email.LeaseReleased():
                mail.held_by = None
            case email.ProviderAccepted():
                mail.ending, mail.ended_at, mail.provider, mail.attempt = "accepted", at, event.provider, event.attempt
                mail.held_by = None
            case email.SendAttemptFailed():
                mail.held_by, mail.detail = None, event.error
                if not event.retryable:
                    mail.ending, mail.ended_at = "refused", at
            case email.DeliveryAbandoned():
                mail.ending, mail.ended_at, mail.detail = "abandoned", at, event.last_error
                mail.attempt = event.attempts
            case email.DeliverySkipped():
                mail.ending, mail.ended_at, mail.detail = "skipped", at, event.reason
            case email.DeliveryRedriven():
                mail.ending = mail.ended_at = None
            case _:
                mail.later.append((event_type, at))

    def _end(self, request_id: UUID | None, ending: str, at: datetime, by: UUID | None = None) -> None:
        request = self.requests.get(request_id) if request_id is not None else None
        if request is not None:
            request.ending, request.ended_at, request.superseded_by = ending, at, by


def _request_of(event: object) -> UUID | None:
    found = getattr(event, "request_id", None) or getattr(event, "challenge_id", None)
    return found if isinstance(found, UUID) else None


def glance(events: Iterable[RecordedEvent], *, now: datetime) -> Glance:
    """The summary of a case's events (any order)."""
    events = sorted(events, key=lambda r: r.global_position)
    times = event_times(events)
    fold = _Fold()
    for r in events:
        at = times[r.global_position]
        if at is not None:
            fold.take(r.event, at, r.event_type)
    requests = list(fold.requests.values())
    anchor = requests[0].made_at if requests else next((t for t in times.values() if t is not None), None)
    if anchor is None:
        return Glance(None, [], [])
    telling = _Telling(fold, anchor, now)
    facts = [(f"Latest {thing}", telling.latest(request)) for thing in ("link", "code")
             if (request := telling.last_of(thing)) is not None]
    facts += [("Refused presentations", telling.refused()), ("Abandoned or bounced", telling.lost())]
    answers = [(TWO_EMAILS, telling.two_emails()), (NO_EMAIL, telling.no_email()),
               (NOT_WORKING, telling.not_working())]
    return Glance(anchor, facts, answers)


class _Telling:
    """The lines, from one fold; every time told relative to ``anchor``."""

    def __init__(self, fold: _Fold, anchor: datetime, now: datetime) -> None:
        self.fold, self.anchor, self.now = fold, anchor, now

    def t(self, moment: datetime) -> str:
        return after(self.anchor, moment)

    def last_of(self, thing: str | None = None) -> _Request | None:
        found = [r for r in self.fold.requests.values() if thing is None or r.thing == thing]
        return found[-1] if found else None

    def mail_of(self, request: _Request) -> _Mail | None:
        """The email that carried the request's link or code (not a notice sent after it was used)."""
        mails = [self.fold.mails[m] for m in request.mails if m in self.fold.mails]
        return next((m for m in mails if m.template in ("reset_link", "otp_code")), mails[0] if mails else None)

    # -- the facts --------------------------------------------------------------------------------

    def latest(self, request: _Request) -> Line:
        mail = self.mail_of(request)
        sent = ("no email was queued",) if mail is None else ("email ", mail.message_id, " ", *self.sent(mail))
        return (*request.name, f", made at {self.t(request.made_at)}; ", *sent, "; ", *self.use(request), ".")

    def sent(self, mail: _Mail) -> Line:
        """How the email ended, after its id: "sent at +3 min through smtp on attempt 2", "not sent: ..."."""
        if mail.ending == "accepted" and mail.ended_at is not None:
            told = f"sent at {self.t(mail.ended_at)} through {mail.provider}"
            told += f" on attempt {mail.attempt}" if mail.attempt > 1 else ""
        elif mail.ending is not None and mail.ended_at is not None:
            told = f"not sent: {self.loss(mail)}"
        elif mail.held_by is not None:
            told = f"not sent yet: {mail.held_by} is sending it (attempt {mail.attempt}), with no outcome yet"
        else:
            told = f"not sent yet: waiting for a worker since {self.t(mail.queued_at)}"
        return (told + "".join(f", then {kind} at {self.t(at)}" for kind, at in mail.later),)

    def loss(self, mail: _Mail) -> str:
        assert mail.ended_at is not None
        when = self.t(mail.ended_at)
        if mail.ending == "abandoned":
            return f"abandoned at {when} after {mail.attempt} attempts ({mail.detail})"
        if mail.ending == "refused":
            return f"refused for good by the provider at {when} ({mail.detail})"
        return f"skipped ({mail.detail}) at {when}"

    def use(self, request: _Request) -> Line:
        """Whether the link or code was used: "used at +8 min", "not used: it expired at +30 min", ..."""
        at = self.t(request.ended_at) if request.ended_at is not None else ""
        wrong = (f" after {request.wrong} wrong code{'s' if request.wrong > 1 else ''}" if request.wrong else "")
        match request.ending:
            case "used":
                return (f"used at {at}",)
            case "verified":
                return (f"verified at {at}{wrong}",)
            case "locked":
                return (f"not used: locked at {at}{wrong}",)
            case "superseded" if request.superseded_by is not None:
                by = self.fold.requests.get(request.superseded_by)
                return ("not used: replaced by ", *(by.name if by else ("request ", request.superseded_by)),
                        f" at {at}")
            case "superseded":
                return (f"not used: replaced at {at}, when the password was changed with another link",)
            case None if self.now >= request.expires_at:
                return (f"not used: it expired at {self.t(request.expires_at)}{wrong}",)
            case None:
                return (f"not used yet{wrong}: it works until {self.t(request.expires_at)}",)
            case other:  # an ending of a kind this module does not know, by its event type
                return (f"not used: {other} at {at}{wrong}",)

    def refused(self) -> Line:
        refusals = self.fold.refusals
        if not refusals:
            return ("none.",)
        parts: list[Part] = [f"{sum(r.count for r in refusals)}: "]
        for index, refusal in enumerate(refusals):
            parts += ["; " if index else "", *self.refusal(refusal)]
        return (*parts, ".")

    def refusal(self, refusal: _Refusal) -> Line:
        if refusal.request_id is None:
            return (f"{refusal.count} {refusal.thing}s no longer usable, counted up to {self.t(refusal.at)}",)
        request = self.fold.requests.get(refusal.request_id)
        name = request.name if request else ("request ", refusal.request_id)
        return (f"the {refusal.thing} of ", *name, f" at {self.t(refusal.at)} ({refusal.reason})")

    def lost(self) -> Line:
        parts: list[Part] = []
        for mail in self.fold.mails.values():
            told = [self.loss(mail)] if mail.ending in ("abandoned", "refused") and mail.ended_at else []
            told += [f"{kind} at {self.t(at)}" for kind, at in mail.later if TROUBLE.search(kind)]
            if told:
                parts += ["; " if parts else "", "email ", mail.message_id, " ", ", ".join(told)]
        return (*parts, ".") if parts else ("none.",)

    # -- the answers ------------------------------------------------------------------------------

    def two_emails(self) -> Line:
        accepted = [m for m in self.fold.mails.values() if m.ending == "accepted" and m.ended_at is not None]
        if not accepted:
            return ("No email was accepted by the provider.",)
        parts: list[Part] = ["One email was" if len(accepted) == 1 else f"{len(accepted)} emails were",
                             " accepted by the provider: "]
        for index, mail in enumerate(accepted):
            notice = "" if mail.template in ("reset_link", "otp_code") else f" ({mail.template.replace('_', ' ')})"
            assert mail.ended_at is not None
            parts += [", " if index else "", mail.message_id, f"{notice} at {self.t(mail.ended_at)}"]
        for mail in accepted:
            if mail.interrupted:
                parts += ["; ", mail.message_id, f" may have arrived twice: the lease of {mail.interrupted[-1]} "
                          f"expired mid-send and attempt {mail.attempt} sent it again"]
        return (*parts, ".")

    def no_email(self) -> Line:
        request = self.last_of()
        refused = [r for r in self.fold.refused_requests if request is None or r[2] >= request.made_at]
        if refused:  # the latest ask was refused: no email was queued for it
            thing, reason, at = refused[-1]
            return (f"No {thing} was sent for the latest request: it was refused ({reason}) at {self.t(at)}, and "
                    "no email was queued.",)
        if request is None:
            return ("No link or code was requested.",)
        mail = self.mail_of(request)
        if mail is None:
            return (f"The latest {request.thing}, of ", *request.name, ", had no email queued.")
        return (f"The latest {request.thing}'s email ", mail.message_id, " was ", *self.sent(mail), ".")

    def not_working(self) -> Line:
        request = self.last_of()
        if request is None:
            return ("No link or code was requested.",)
        refusals = self.fold.refusals
        parts: list[Part]
        if refusals:
            last = refusals[-1]
            parts = [*self.refusal_why(last)]
            if len(refusals) > 1 or last.count > 1:
                parts.append(f" ({sum(r.count for r in refusals)} refused in all)")
        else:
            parts = ["No link or code was refused"]
            replaced = [r for r in self.fold.requests.values()
                        if r.ending == "superseded" and r.superseded_by in self.fold.requests]
            if replaced:
                old = replaced[-1]
                assert old.ended_at is not None and old.superseded_by is not None
                parts += ["; ", *old.name, f"'s {old.thing} stopped working at {self.t(old.ended_at)}, when ",
                          *self.fold.requests[old.superseded_by].name, " replaced it"]
        return (*parts, f"; the latest {request.thing}, of ", *request.name, ", was ", *self.use(request), ".")

    def refusal_why(self, refusal: _Refusal) -> Line:
        """A refused presentation and why the link or code no longer worked then."""
        request = self.fold.requests.get(refusal.request_id) if refusal.request_id else None
        if request is None:
            return (f"{refusal.count} presentations of {refusal.thing}s no longer usable were refused, the last at "
                    f"{self.t(refusal.at)}",)
        told: Line = (f"The {refusal.thing} of ", *request.name, f" was refused at {self.t(refusal.at)}: ")
        ended = self.t(request.ended_at) if request.ended_at else ""
        if refusal.reason == "superseded" and request.superseded_by in self.fold.requests:
            assert request.superseded_by is not None
            return (*told, "it had been replaced by ", *self.fold.requests[request.superseded_by].name,
                    f" at {ended}")
        if refusal.reason == "expired":
            return (*told, f"it had expired at {self.t(request.expires_at)}")
        if refusal.reason == "used" and ended:
            return (*told, f"it had already been used at {ended}")
        return (*told, f"it could no longer be used ({refusal.reason})")
