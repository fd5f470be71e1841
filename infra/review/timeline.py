"""The timeline of a user, a request or a message: the log's own events, for support staff.

Events are returned as stored (payload and metadata straight from the log),
so the answer is what an auditor would read in the database, except for the
addresses: those read in plain text, or ``[erased]`` after ``privacy
forget``, never as the envelope they are stored in. Which events
are about what is ``infra.review.lookup``'s answer, the same that
``history`` and ``explain`` tell.

Every look-up is made for one tenant: a request or message of another
tenant is answered exactly as one that does not exist, and ``user_id`` in
the answer is the tenant's own id (the stored events keep the scoped one).

With a read replica configured (``AUTHLEDGER_READ_DATABASE_URL``) the
timeline is read there, and ``replica`` in the answer says how far behind.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from attrs import frozen

from domain.input_checks import check_text
from domain.errors import NotFound
from domain.log import RecordedEvent
from domain.tenants import DEFAULT_TENANT, scoped_user, split_scoped_user
from infra.db.replica import ReplicaLag
from infra.review.lookup import Lookup, Story, about_message, about_request, about_user, looking_up, of_tenant
from infra.services.unit_of_work import ServiceContext

DEFAULT_LIMIT = 500


@frozen
class Timeline:
    user_id: str
    request_id: UUID | None
    message_id: UUID | None
    events: list[dict[str, Any]]
    truncated: bool
    replica: ReplicaLag | None = None  # read from the read replica, this far behind; None: from the primary

    def as_json(self) -> dict[str, Any]:
        answer = {
            "user_id": self.user_id,
            "request_id": str(self.request_id) if self.request_id else None,
            "message_id": str(self.message_id) if self.message_id else None,
            "events": self.events,
            "truncated": self.truncated,
        }
        return answer if self.replica is None else {**answer, "replica": self.replica.as_json()}


def _as_stored(lookup: Lookup, events: list[RecordedEvent], limit: int) -> tuple[list[dict[str, Any]], bool]:
    """The most recent ``limit`` events, oldest first, as the log holds them (addresses opened)."""
    return [
        {
            "position": row.global_position, "stream": row.stream_id, "version": row.stream_version,
            "type": row.event_type, "schema_version": row.schema_version,
            "recorded_at": row.recorded_at.isoformat(), "payload": lookup.payload(row), "metadata": row.metadata,
        }
        for row in lookup.stored(events[-limit:])
    ], len(events) > limit


def _local_user(story: Story) -> str:
    return split_scoped_user(story.user_id)[1] if story.user_id is not None else ""


def user_timeline(ctx: ServiceContext, user_id: str, *, tenant: str = DEFAULT_TENANT,
                  limit: int = DEFAULT_LIMIT) -> Timeline:
    """Every request, challenge and email of one user of ``tenant``, and their erasure (the most recent ``limit``)."""
    check_text("user_id", user_id, max_length=200)  # no space: never another tenant's scoped id
    with looking_up(ctx.read_engine) as lookup:
        events, truncated = _as_stored(lookup, about_user(lookup, scoped_user(tenant, user_id)), limit)
    return Timeline(user_id, None, None, events, truncated, lookup.replica)


def request_timeline(ctx: ServiceContext, request_id: UUID, *, tenant: str = DEFAULT_TENANT,
                     limit: int = DEFAULT_LIMIT) -> Timeline:
    """One reset request or OTP challenge: its events, its emails', and those of the request that replaced it."""
    with looking_up(ctx.read_engine) as lookup:
        story = of_tenant(about_request(lookup, request_id, tenant), tenant)
        if story is None:
            raise NotFound(f"no reset request or OTP challenge {request_id}")
        events, truncated = _as_stored(lookup, story.events, limit)
    return Timeline(_local_user(story), request_id, None, events, truncated, lookup.replica)


def message_timeline(ctx: ServiceContext, message_id: UUID, *, tenant: str = DEFAULT_TENANT,
                     limit: int = DEFAULT_LIMIT) -> Timeline:
    """One email: its delivery events and the events of the request it serves (why it was or was not sent)."""
    with looking_up(ctx.read_engine) as lookup:
        story = of_tenant(about_message(lookup, message_id, tenant), tenant)
        if story is None:
            raise NotFound(f"no email {message_id}")
        events, truncated = _as_stored(lookup, story.events, limit)
    return Timeline(_local_user(story), story.request_id, message_id, events, truncated,
                    lookup.replica)
