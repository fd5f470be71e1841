"""`authledger privacy forget`: erase a user's personal data by destroying their key.

One transaction deletes the user's rows of ``subject_keys`` and appends
``SubjectErased`` to ``subject:<user_id>``. From then on whatever opens that
user's personal fields (a service deciding on their stream, a worker about to
render their email, any decoding with a keyring) reads ``[erased]``; readers
that leave the fields sealed (projections, history, exports) never showed
them. The log is not touched, so the hash chain over its ciphertext still
verifies. What stays: user ids, request and message ids, times, and the
metadata of every event (docs/operations.md, "Personal data and erasure").

Needs no master key: an erasure never waits for a key that was lost.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from attrs import frozen

from domain.otp import otp_stream
from domain.privacy import SubjectErased, decide_erasure, fold_subject, subject_stream
from domain.reset import reset_stream
from infra.eventlog.postgres import PostgresEventStore
from infra.eventlog.subject_keys import destroy_keys
from infra.services.unit_of_work import ServiceContext, append_and_fold, lock_stream


@frozen
class Erasure:
    user_id: str
    erased_at: datetime
    key_ids: tuple[str, ...]  # the data keys destroyed now, if the user had any
    recorded: bool  # False: already erased, with nothing left to destroy; nothing changed

    def as_dict(self) -> dict[str, Any]:
        return {"user_id": self.user_id, "erased_at": self.erased_at.isoformat(), "key_ids": list(self.key_ids),
                "recorded": self.recorded}


def forget(ctx: ServiceContext, user_id: str, metadata: Mapping[str, Any] | None = None) -> Erasure:
    """Destroy the user's data keys and record ``SubjectErased``; ``NotFound`` for an unknown user."""
    stream_id = subject_stream(user_id)
    with ctx.engine.begin() as connection:
        lock_stream(connection, stream_id)
        now = ctx.clock.now()
        key_ids = destroy_keys(connection, user_id)
        store = PostgresEventStore(connection)
        history = store.load(stream_id)
        # Every event about a user is on one of their request streams (an email
        # is queued in the same transaction as the request event that needs it).
        has_events = store.has_events([reset_stream(user_id), otp_stream(user_id)])
        events = decide_erasure(fold_subject(r.event for r in history), user_id=user_id, destroyed_key_ids=key_ids,
                                has_events=has_events, now=now)
        if not events:
            last = next(r.event for r in reversed(history) if isinstance(r.event, SubjectErased))
            return Erasure(user_id, last.erased_at, (), recorded=False)
        append_and_fold(connection, [(stream_id, len(history), events)], metadata)
    return Erasure(user_id, now, tuple(key_ids), recorded=True)
