"""`authledger privacy forget`: erase a user's personal data by destroying their key.

One transaction deletes the user's rows of ``subject_keys`` and appends
``SubjectErased`` (with the operator's reason) to ``subject:<user_id>``. It
first takes the locks of the user's reset and OTP streams, which every write
that seals the user's data holds (a create inserts a new user's key in its
own transaction): a create in flight is waited for and its key destroyed,
and a later one comes after the erasure, under a new key.
From then on whatever opens that user's personal fields (a service deciding
on their stream, a worker about to render their email, a reviewer's
timeline) reads ``[erased]``. The log is not touched, so the hash chain over
its ciphertext still verifies. What stays: user ids, request and message ids,
times, and the metadata of every event (docs/operations.md, "Personal data
and erasure").

``preview`` answers what an erasure would destroy and writes nothing: the
dry run, and what an operator confirms on a terminal.

Needs no master key: an erasure never waits for a key that was lost.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

from attrs import frozen
from sqlalchemy import Connection, text

from domain.clients import Caller
from domain.email import email_stream
from domain.errors import NotFound
from domain.privacy import (
    SubjectErased, check_subject, decide_erasure, describe_user, erasure_reason, fold_subject, request_streams,
    subject_of, subject_stream,
)
from infra.eventlog.personal_data import envelope_key_ids
from infra.eventlog.postgres import PostgresEventStore
from infra.eventlog.queries import stream_payloads
from infra.eventlog.subject_keys import destroy_keys
from infra.eventlog.tags import PERSONAL_FIELDS
from projections.audit_index import MESSAGE_FIELDS  # the fields naming an email an event queued
from infra.services.locks import lock_streams
from infra.services.unit_of_work import ServiceContext, append_and_fold

KEY_IDS = text("SELECT key_id FROM subject_keys WHERE user_id = :user_id ORDER BY key_id")
# A link or code is outstanding while it is open and not yet expired.
OUTSTANDING = text("""
    SELECT (SELECT count(*) FROM reset_tokens
             WHERE user_id = :user_id AND status = 'open' AND expires_at > :now) AS links,
           (SELECT count(*) FROM otp_challenges
             WHERE user_id = :user_id AND status = 'open' AND expires_at > :now) AS codes
""")


@frozen
class Erasure:
    user_id: str
    erased_at: datetime
    key_ids: tuple[str, ...]  # the data keys destroyed now, if the user had any
    recorded: bool  # False: already erased, with nothing left to destroy; nothing changed
    reason: str | None  # why, as recorded (the earlier erasure's when nothing changed now; None before reasons)

    def as_dict(self) -> dict[str, Any]:
        return {"user_id": self.user_id, "erased_at": self.erased_at.isoformat(), "key_ids": list(self.key_ids),
                "recorded": self.recorded, "reason": self.reason}


@frozen
class ErasurePreview:
    """What ``forget`` would destroy now; nothing was written to find out."""

    user_id: str
    key_ids: tuple[str, ...]  # the data keys that would be destroyed
    sealed_events: int  # events whose personal fields would read [erased] from then on
    open_links: int  # reset links of the user still open and unexpired
    open_codes: int  # OTP codes of the user still open and unexpired
    erased_at: datetime | None  # when the user was last erased, if ever

    def as_dict(self) -> dict[str, Any]:
        return {"user_id": self.user_id, "key_ids": list(self.key_ids), "sealed_events": self.sealed_events,
                "open_links": self.open_links, "open_codes": self.open_codes,
                "erased_at": self.erased_at.isoformat() if self.erased_at else None}


def preview(ctx: ServiceContext, user_id: str) -> ErasurePreview:
    """What erasing ``user_id`` would destroy; ``NotFound`` for a user with neither a key nor an event."""
    check_subject(user_id)
    # One snapshot, so the keys, the events and the open links agree.
    with ctx.engine.connect().execution_options(isolation_level="REPEATABLE READ") as connection, \
            connection.begin():
        key_ids = tuple(connection.execute(KEY_IDS, {"user_id": user_id}).scalars())
        store = PostgresEventStore(connection)
        history = store.load(subject_stream(user_id))
        own = [tuple(row) for row in stream_payloads(connection, list(request_streams(user_id)))]
        if not key_ids and not own and not history:
            raise NotFound(f"no user {describe_user(user_id)}: no personal data key and no events name them")
        links, codes = connection.execute(OUTSTANDING, {"user_id": user_id, "now": ctx.clock.now()}).one()
        erasures = [r.event for r in history if isinstance(r.event, SubjectErased)]
        return ErasurePreview(user_id, key_ids, _sealed_under(connection, own, set(key_ids)), links, codes,
                              erasures[-1].erased_at if erasures else None)


def _sealed_under(connection: Connection, own: list[tuple[str, Any]], key_ids: set[str]) -> int:
    """How many of the user's events, and of the emails those queued, hold a field sealed under ``key_ids``."""
    if not key_ids:
        return 0
    messages = sorted({str(payload[f]) for _, payload in own for f in MESSAGE_FIELDS if payload.get(f)})
    emails = [tuple(row) for row in stream_payloads(connection, [email_stream(UUID(m)) for m in messages])]
    return sum(1 for row in own + emails if envelope_key_ids([row], PERSONAL_FIELDS) & key_ids)


def forget(ctx: ServiceContext, user_id: str, *, reason: str, metadata: Mapping[str, Any] | None = None) -> Erasure:
    """Destroy the user's data keys and record ``SubjectErased`` with ``reason``.

    ``NotFound`` for an unknown user, ``InvalidInput`` for a blank reason or
    one holding an address; either way nothing is written.

    Serialised with every write for the user: a create either committed
    before (its key is destroyed here, and its link or code dies with it)
    or waits until this commits and comes after, the user coming back under
    a new key.
    """
    reason = erasure_reason(reason)
    check_subject(user_id)
    stream_id = subject_stream(user_id)
    # READ COMMITTED, said rather than assumed: each statement after the locks
    # sees every write they waited for. A REPEATABLE READ snapshot would date
    # from the first lock's statement, before its wait, and miss a create
    # that committed meanwhile.
    with ctx.engine.connect().execution_options(isolation_level="READ COMMITTED") as connection, \
            connection.begin():
        # The locks of the user's creates (and their verifies and consumes),
        # held before the keys are read: a create that has inserted a key but
        # not yet committed holds its stream's lock, so no key can be missed
        # here or added until this commits.
        lock_streams(connection, [*request_streams(user_id), stream_id])
        now = ctx.clock.now()
        key_ids = destroy_keys(connection, user_id)
        store = PostgresEventStore(connection)
        history = store.load(stream_id)
        has_events = store.has_events(list(request_streams(user_id)))
        events = decide_erasure(fold_subject(r.event for r in history), user_id=user_id, destroyed_key_ids=key_ids,
                                has_events=has_events, now=now, reason=reason)
        if not events:
            last = next(r.event for r in reversed(history) if isinstance(r.event, SubjectErased))
            return Erasure(user_id, last.erased_at, (), recorded=False, reason=last.reason)
        append_and_fold(connection, [(stream_id, len(history), events)], metadata)
    return Erasure(user_id, now, tuple(key_ids), recorded=True, reason=reason)


def erase_user(ctx: ServiceContext, caller: Caller, user_id: str, reason: str,
               metadata: Mapping[str, Any]) -> Erasure:
    """An admin key's erasure of a user of its own tenant (``POST /v1/users/{user_id}/erasure`` and the console).

    The caller's scopes are checked by the entry point; ``user_id`` is tenant-local and scoped with the
    caller's tenant here, so no key reaches another tenant's user.
    """
    return forget(ctx, subject_of(caller.tenant, user_id), reason=reason, metadata=metadata)
