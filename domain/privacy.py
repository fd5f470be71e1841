"""Erasure of a user's personal data: the ``subject:<user_id>`` stream.

Personal data in events (a recipient address) is encrypted per user at the
edge (``infra.personal_data``); erasing it destroys that user's key. The log
itself is never changed, so the erasure is recorded as a fact of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from attrs import frozen

from domain.decisions import check_text, require_utc
from domain.errors import NotFound


def subject_stream(user_id: str) -> str:
    """The stream id holding the privacy facts of one user."""
    return f"subject:{user_id}"


@frozen
class SubjectErased:
    """The user's data keys were destroyed: their personal data in the log now reads ``[erased]``."""

    user_id: str
    erased_at: datetime
    key_ids: tuple[str, ...]  # the data keys destroyed; none when the user had no personal data left


@frozen
class SubjectState:
    erasures: int = 0  # SubjectErased facts recorded so far


def fold_subject(events: Iterable[object]) -> SubjectState:
    state = SubjectState()
    for event in events:
        if isinstance(event, SubjectErased):
            state = SubjectState(state.erasures + 1)
    return state


def decide_erasure(
    state: SubjectState, *, user_id: str, destroyed_key_ids: Sequence[str], has_events: bool, now: datetime
) -> list[SubjectErased]:
    """Record that a user's key was destroyed, or, with no key left, that there was nothing to destroy.

    With neither a key nor any event the user is unknown: most likely a typo,
    and recording an erasure of nobody would only hide it. A repeat erasure
    with nothing left to destroy records nothing new.
    """
    check_text("user_id", user_id, max_length=200)
    if not destroyed_key_ids:
        if state.erasures:
            return []
        if not has_events:
            raise NotFound(f"no user {user_id!r}: no personal data key and no events name them; nothing was changed")
    require_utc(now)
    return [SubjectErased(user_id, now, tuple(destroyed_key_ids))]
