"""Erasure of a user's personal data: the ``subject:<user_id>`` stream.

Personal data in events (a recipient address) is encrypted per user at the
edge (``infra.eventlog.personal_data``); erasing it destroys that user's key. The log
itself is never changed, so the erasure is recorded as a fact of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from attrs import frozen

from domain.input_checks import check_text, operator_reason, require_utc
from domain.errors import NotFound
from domain.otp_events import otp_stream
from domain.reset_events import reset_stream
from domain.tenants import DEFAULT_TENANT, check_tenant_name, scoped_user, split_scoped_user


def subject_stream(user_id: str) -> str:
    """The stream id holding the privacy facts of one user."""
    return f"subject:{user_id}"


def request_streams(user_id: str) -> tuple[str, ...]:
    """The streams of one user's requests: every write that seals the user's personal data decides on one.

    An email is queued in the transaction of the request event that needs
    it, so these streams (and their locks) cover every event about the user.
    """
    return reset_stream(user_id), otp_stream(user_id)


# Re-wrapping data keys under a new master key is a fact about the whole
# service, not about one user: it goes on a stream of its own.
MASTER_KEYS_STREAM = "master-keys"


@frozen
class SubjectErased:
    """The user's data keys were destroyed: their personal data in the log now reads ``[erased]``."""

    user_id: str
    erased_at: datetime
    key_ids: tuple[str, ...]  # the data keys destroyed; none when the user had no personal data left
    reason: str | None = None  # why, as the operator said it; None for erasures recorded before reasons were asked


@frozen
class SubjectState:
    erasures: int = 0  # SubjectErased facts recorded so far


def fold_subject(events: Iterable[object]) -> SubjectState:
    state = SubjectState()
    for event in events:
        if isinstance(event, SubjectErased):
            state = SubjectState(state.erasures + 1)
    return state


def check_subject(user_id: str) -> None:
    """``InvalidInput`` unless ``user_id`` is a scoped user id (``domain.tenants``) of a well-formed user."""
    tenant, local_id = split_scoped_user(user_id)
    check_tenant_name(tenant)
    check_text("user_id", local_id, max_length=200)


def subject_of(tenant: str, user_id: str) -> str:
    """The scoped id of ``user_id`` of ``tenant``; ``InvalidInput`` for a malformed tenant or user id.

    Checked before scoping: a user id holding a space would otherwise read as another tenant's user.
    """
    check_tenant_name(tenant)
    check_text("user_id", user_id, max_length=200)
    return scoped_user(tenant, user_id)


def describe_user(user_id: str) -> str:
    """A scoped user id in words: ``'42'``, or ``'42' of tenant 'acme'``."""
    tenant, local_id = split_scoped_user(user_id)
    return f"{local_id!r}" if tenant == DEFAULT_TENANT else f"{local_id!r} of tenant {tenant!r}"


def erasure_reason(reason: object) -> str:
    """Why a user is erased, trimmed; ``InvalidInput`` unless it is one short line without an address."""
    return operator_reason(reason, blank="an erasure needs a reason (--reason): say why, e.g. the ticket it answers",
                           instead="name the ticket or the request instead")


def decide_erasure(
    state: SubjectState, *, user_id: str, destroyed_key_ids: Sequence[str], has_events: bool, now: datetime,
    reason: str,
) -> list[SubjectErased]:
    """Record that a user's key was destroyed, or, with no key left, that there was nothing to destroy.

    With neither a key nor any event the user is unknown: most likely a typo,
    and recording an erasure of nobody would only hide it. A repeat erasure
    with nothing left to destroy records nothing new.
    """
    check_subject(user_id)
    reason = erasure_reason(reason)
    if not destroyed_key_ids:
        if state.erasures:
            return []
        if not has_events:
            raise NotFound(f"no user {describe_user(user_id)}: no personal data key and no events name them; "
                           "nothing was changed")
    require_utc(now)
    return [SubjectErased(user_id, now, tuple(destroyed_key_ids), reason)]


@frozen
class DataKeysRewrapped:
    """Data keys wrapped under older master keys were re-wrapped under the newest; the keys did not change.

    One per batch, in the transaction of the batch, so the log counts every
    key moved even when a run stops half way. Ids only, never key material.
    """

    master_key_id: str  # the newest, which wraps them now
    from_master_key_ids: tuple[str, ...]  # the ids they were wrapped under before
    count: int  # how many data keys this batch re-wrapped
    rewrapped_at: datetime


def decide_rewrap(
    rewrapped: Mapping[str, int], *, master_key_id: str, now: datetime
) -> list[DataKeysRewrapped]:
    """Record the keys of one batch moved onto ``master_key_id``, by the old ids they left; none, nothing."""
    moved = {old: n for old, n in rewrapped.items() if n > 0}
    if not moved:
        return []
    if master_key_id in moved:
        raise ValueError(f"keys cannot be re-wrapped from master key {master_key_id!r} onto itself")
    require_utc(now)
    return [DataKeysRewrapped(master_key_id, tuple(sorted(moved)), sum(moved.values()), now)]
