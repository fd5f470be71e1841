"""Checks on what comes into the domain: text fields, user ids, free text, UTC datetimes.

Bad input is refused with ``InvalidInput`` before anything is decided; a naive
datetime is a programming error (``ValueError``).

Two rules keep personal data where erasure reaches it. The log is
append-only and only sealed fields (``infra.eventlog.tags.PERSONAL_FIELDS``)
can be erased, so text stored in clear must not hold an email address: a
new user id holds no ``@`` in any form (it names the user's streams for
ever), and free text (an operator's reason, a tenant's display text) holds
no address, no ``@`` look-alike and no bidirectional controls. Both judge
the text as it would be read (``domain.characters.readable_form``), so that
``user＠example.com``, ``user%40example.com`` and ``user%2540example.com``
are refused like ``user@example.com``. The API, the CLI and the console all
call these functions: they refuse the same inputs with the same words.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from domain.addresses import check_address
from domain.characters import has_at_lookalike, has_bidi_controls, has_unsafe_characters, readable_form
from domain.errors import InvalidInput


def require_utc(moment: datetime) -> None:
    """Raise ``ValueError`` unless ``moment`` is timezone-aware UTC.

    Naive datetimes compare wrongly with stored ones and shift by the server's
    zone; the domain refuses them instead of guessing.
    """
    if not isinstance(moment, datetime) or moment.utcoffset() != timedelta(0):
        raise ValueError(f"expected a timezone-aware UTC datetime, got {moment!r}")


def check_text(name: str, value: object, *, max_length: int) -> None:
    """Raise ``InvalidInput`` unless ``value`` is a short single-token string."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{name} must be a non-empty string")
    if len(value) > max_length:
        raise InvalidInput(f"{name} must be at most {max_length} characters")
    if has_unsafe_characters(value):
        raise InvalidInput(f"{name} must not contain whitespace or control characters")


MAX_USER_ID = 200
USER_ID_RULE = ("a user id must not hold an email address or an @ in any form (such as ＠, %40 or &#64;): it "
                "names the user's records in the append-only log, where erasure cannot reach it; send the "
                "application's own id for the user instead")
ENCODED = "is encoded too many times over to be read; send it as plain text"


def user_id_problem(value: str) -> str | None:
    """Why ``value`` may not be a new user id (an @ or a bidirectional control in any form), or None.

    ``check_text`` has already refused raw controls; this reads the id as a
    person would (``readable_form``). The message never repeats the value.
    """
    readable = readable_form(value)
    if readable is None:
        return f"the user id {ENCODED}"
    if "@" in readable:
        return USER_ID_RULE
    if has_bidi_controls(readable):
        return "a user id must not hold bidirectional control characters, encoded or not"
    return None


def check_token(name: str, value: object, *, max_length: int) -> None:
    """``check_text``, and printable ASCII only: what a new id or key brought into the log may hold.

    The one rule for the HTTP API (its schemas' ``[!-~]`` patterns) and the
    command line alike: an id the CLI stored in a character the API refuses
    could never be named over the API.
    """
    check_text(name, value, max_length=max_length)
    assert isinstance(value, str)
    if not value.isascii():
        raise InvalidInput(f"{name} must be printable ASCII characters without spaces")


def check_user_id(value: object) -> str:
    """A new user id, or ``InvalidInput`` unless it is a short single ASCII token without an @ in any form."""
    check_text("user_id", value, max_length=MAX_USER_ID)
    assert isinstance(value, str)
    if problem := user_id_problem(value):  # first, as the API asks it first: an @ look-alike is named as such
        raise InvalidInput(problem)
    check_token("user_id", value, max_length=MAX_USER_ID)
    return value


# Something@something: an address as a reader would take it, with or without a dot in the domain.
ADDRESS_LIKE = re.compile(r"[^\s@]+@[^\s@]+")


def _has_control_characters(value: str) -> bool:
    # C0 and C1 controls and DEL, and the Unicode line and paragraph separators: free text is one line.
    return any(ord(c) < 32 or 127 <= ord(c) < 160 or c in "\u2028\u2029" for c in value)


def free_text_problem(value: str, *, what: str, instead: str = "") -> str | None:
    """Why ``value`` may not be stored in clear as ``what`` ("the reason"), or None.

    Refused: control characters (one line of plain text), bidirectional
    controls, an @ look-alike, and an email address in the text as it would
    be read. ``instead`` ends the message of an address. Never repeats the value.
    """
    then = f"; {instead}" if instead else ""
    if _has_control_characters(value):
        return f"{what} holds control characters; give it as one line of plain text"
    readable = readable_form(value)
    if has_bidi_controls(value) or (readable is not None and has_bidi_controls(readable)):
        return f"{what} holds bidirectional control characters, which show text in another order than it is stored"
    if has_at_lookalike(value):
        return f"{what} holds an @ look-alike (such as the fullwidth ＠), which reads as an email address{then}"
    if readable is None:
        return f"{what} {ENCODED}"
    if ADDRESS_LIKE.search(readable):
        return f"{what} holds an email address{then}"
    return None


MAX_REASON_LENGTH = 500


def operator_reason(reason: object, *, blank: str, instead: str) -> str:
    """An operator's reason for the record, trimmed; ``InvalidInput`` (``blank`` when empty) unless it is one
    line of plain text, short, and free of email addresses (``instead`` says what to write)."""
    reason = reason.strip() if isinstance(reason, str) else ""
    if not reason:
        raise InvalidInput(blank)
    if len(reason) > MAX_REASON_LENGTH:
        raise InvalidInput(f"the reason is {len(reason)} characters long; keep it to {MAX_REASON_LENGTH}")
    # The reason stays in the log in clear: `privacy forget` could not erase an address in it.
    if problem := free_text_problem(reason, what="the reason", instead=instead):
        raise InvalidInput(problem)
    return reason


MAX_ACTOR = 100


def check_actor(actor: object) -> str:
    """Who acted, as the record names them (metadata, an event's actor), trimmed; ``InvalidInput`` unless it is
    short plain text without an email address in any form."""
    if not isinstance(actor, str) or not actor.strip() or len(actor) > MAX_ACTOR:
        raise InvalidInput(f"the actor is 1-{MAX_ACTOR} characters naming who acts (--actor)")
    if problem := free_text_problem(actor, what="the actor",
                                    instead="name a person or an account with --actor, not an address"):
        raise InvalidInput(problem)
    return actor.strip()


def check_request_input(
    user_id: object, recipient: object, idempotency_key: object, client: object
) -> None:
    """Raise ``InvalidInput`` unless a request command's common fields are
    well formed, so that bad input is refused before anything is decided."""
    check_user_id(user_id)
    check_address(recipient)
    if idempotency_key is not None:
        check_token("idempotency_key", idempotency_key, max_length=255)
    if client is not None:
        check_token("client", client, max_length=200)
