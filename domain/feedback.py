"""What a provider reports after accepting an email, decided on the email's stream.

A report (``Feedback``) names a kind, "delivered", "bounce" or "complaint",
whether a bounce is permanent, and the server's diagnostic. It becomes one
event on ``email:<message_id>`` (``domain.email``); a permanent bounce or a
complaint also suppresses the recipient (``domain.suppression``). Providers
retry their webhooks and a bounce report may be read twice, so the same
report again (same kind, permanence and diagnostic) records nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from attrs import frozen

from domain.email import (
    FEEDBACK_SOURCES, EmailQueued, ProviderBounced, ProviderComplained, ProviderDelivered,
)
from domain.errors import InvalidInput, NotFound
from domain.suppression import AddressSuppressed

KINDS = ("delivered", "bounce", "complaint")
MAX_DIAGNOSTIC = 1000
FeedbackEvent = ProviderDelivered | ProviderBounced | ProviderComplained


@frozen
class Feedback:
    kind: str  # one of KINDS
    source: str  # one of domain.email.FEEDBACK_SOURCES
    permanent: bool = False  # a bounce's: the address will never take mail (5.x.x), not "try later" (4.x.x)
    diagnostic: str = ""

    @property
    def suppresses(self) -> bool:
        return self.kind == "complaint" or (self.kind == "bounce" and self.permanent)


def check_feedback(kind: object, source: str, *, permanent: object = False, diagnostic: object = "") -> Feedback:
    """A well-formed report; ``InvalidInput`` (nothing written) naming what is wrong."""
    if kind not in KINDS:
        raise InvalidInput(f"type must be one of: {', '.join(KINDS)}")
    if source not in FEEDBACK_SOURCES:
        raise InvalidInput(f"source must be one of: {', '.join(FEEDBACK_SOURCES)}")
    if not isinstance(permanent, bool):
        raise InvalidInput("permanent must be true or false")
    if not isinstance(diagnostic, str) or len(diagnostic) > MAX_DIAGNOSTIC:
        raise InvalidInput(f"diagnostic must be text of at most {MAX_DIAGNOSTIC} characters")
    # A server's own words, taken as they come: folded onto one line (servers fold long replies), and
    # anything unprintable (a control character, a lone surrogate) read as a space, so that it reads as one
    # line in a timeline and can never forge a log line.
    one_line = " ".join("".join(c if c.isprintable() else " " for c in diagnostic).split())
    return Feedback(str(kind), source, permanent if kind == "bounce" else False, one_line)


def _same(event: object, feedback: Feedback) -> bool:
    match event:
        case ProviderDelivered():
            return feedback.kind == "delivered"
        case ProviderComplained():
            return feedback.kind == "complaint"
        case ProviderBounced():
            return (feedback.kind == "bounce" and event.permanent == feedback.permanent
                    and event.diagnostic == feedback.diagnostic)
    return False


def decide_feedback(
    history: Iterable[object], feedback: Feedback, *, now: datetime, address_hash: Callable[[str], str | None],
) -> list[FeedbackEvent | AddressSuppressed]:
    """The events a report adds to its email's stream: none for a repeat; ``NotFound`` for no such email.

    ``address_hash(recipient)`` is the recipient's keyed hash, or None when
    it cannot be had (the user was erased: the recipient reads "[erased]"),
    and then nothing is suppressed.
    """
    events = list(history)
    queued = next((e for e in events if isinstance(e, EmailQueued)), None)
    if queued is None:
        raise NotFound("no such message")
    if any(_same(event, feedback) for event in events):
        return []
    told: FeedbackEvent
    if feedback.kind == "delivered":
        told = ProviderDelivered(queued.message_id, queued.user_id, now, feedback.source)
    elif feedback.kind == "bounce":
        told = ProviderBounced(queued.message_id, queued.user_id, now, feedback.source, feedback.permanent,
                               feedback.diagnostic)
    else:
        told = ProviderComplained(queued.message_id, queued.user_id, now, feedback.source)
    decided: list[FeedbackEvent | AddressSuppressed] = [told]
    address_hash_ = address_hash(queued.recipient) if feedback.suppresses else None
    if address_hash_ is not None:
        decided.append(AddressSuppressed(queued.user_id, queued.message_id, address_hash_,
                                         "complaint" if feedback.kind == "complaint" else "bounce", now))
    return decided
