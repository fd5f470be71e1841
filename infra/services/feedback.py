"""Recording what a provider reports after accepting an email: delivered, bounced, complained.

Every channel (the generic endpoint, the Postmark and SendGrid webhooks, the
bounce mailbox) ends here: it names the email by authledger's message id or
by the provider's (``email_outbox.provider_message_id``, recorded with
``ProviderAccepted``), and the report is decided on the email's stream under
its lock (``domain.feedback``), so a webhook retried while the first is
still being recorded finds the first and records nothing. A permanent
bounce or a complaint suppresses the recipient in the same transaction.

An id that names no email, or an email of another tenant, is answered with
the same ``NotFound``: a caller learns nothing of other tenants' mail.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from uuid import UUID

from attrs import frozen
from sqlalchemy import Connection, select

from domain.email import email_stream
from domain.errors import InvalidInput, NotFound
from domain.feedback import Feedback, decide_feedback
from domain.suppression import AddressSuppressed
from domain.privacy import request_streams
from domain.tenants import tenant_of
from infra.db import tables
from infra.services.address_index import address_hmac
from infra.services.locks import lock_streams
from infra.services.unit_of_work import ServiceContext, StreamOf, decide_events_on_stream

MAX_PROVIDER_ID = 255
OUTBOX = tables.email_outbox
UNKNOWN = "no email with that id is known"


@frozen
class MessageRef:
    """How a report names its email: authledger's message id, or the id the provider gave it."""

    message_id: UUID | None = None
    provider_message_id: str | None = None

    def __attrs_post_init__(self) -> None:
        if (self.message_id is None) == (self.provider_message_id is None):
            raise InvalidInput("give exactly one of message_id or provider_message_id")
        given = self.provider_message_id
        if given is not None and not (0 < len(given) <= MAX_PROVIDER_ID and given.isascii() and given.isprintable()
                                      and " " not in given):
            raise InvalidInput(f"provider_message_id must be 1-{MAX_PROVIDER_ID} printable ASCII characters, "
                               "no spaces")


@frozen
class FeedbackRecorded:
    message_id: UUID
    recorded: bool  # False: the same report was recorded before; nothing was written now
    suppressed: bool  # the recipient was added to the suppression list now

    def as_dict(self) -> dict[str, Any]:
        return {"message_id": str(self.message_id), "recorded": self.recorded, "suppressed": self.suppressed}


def sealing_for(user_id: str, stream_id: str) -> StreamOf:
    """``stream_id``, decided on after the locks of the user's request streams are held, as every write that
    seals a user's personal data is (``domain.privacy.request_streams``): an erasure in flight is waited for,
    and what is sealed after it reads the recipient ``[erased]``, never seals it again under a new key."""
    def stream_of(connection: Connection) -> str:
        lock_streams(connection, request_streams(user_id))
        return stream_id

    return stream_of


def find_message(ctx: ServiceContext, ref: MessageRef, *, tenant: str | None) -> tuple[UUID, str]:
    """The message ``ref`` names and its (scoped) user, within ``tenant`` (None: any, for deployment-wide
    webhooks); else ``NotFound``."""
    column = OUTBOX.c.message_id if ref.message_id is not None else OUTBOX.c.provider_message_id
    value: object = ref.message_id if ref.message_id is not None else ref.provider_message_id
    query = select(OUTBOX.c.message_id, OUTBOX.c.user_id).where(column == value).order_by(OUTBOX.c.queued_at)
    with ctx.engine.connect() as connection:
        found = [row for row in connection.execute(query) if tenant is None or tenant_of(row.user_id) == tenant]
    if not found:
        raise NotFound(UNKNOWN)
    return found[-1].message_id, found[-1].user_id


def record_feedback(
    ctx: ServiceContext, ref: MessageRef, feedback: Feedback, metadata: Mapping[str, Any] | None = None, *,
    tenant: str | None,
) -> FeedbackRecorded:
    """Record ``feedback`` on the email ``ref`` names (within ``tenant``); ``NotFound`` (nothing written) if none.

    The same report again records nothing (``recorded`` is False).
    """
    message_id, user_id = find_message(ctx, ref, tenant=tenant)

    def hash_of(recipient: str) -> str | None:
        try:
            return address_hmac(ctx.keys, recipient)
        except InvalidInput:  # "[erased]": the user is gone, and so is what could be suppressed
            return None

    events = decide_events_on_stream(
        ctx, sealing_for(user_id, email_stream(message_id)), list,
        lambda history, now: decide_feedback(history, feedback, now=now, address_hash=hash_of), metadata)
    return FeedbackRecorded(message_id, bool(events), any(isinstance(e, AddressSuppressed) for e in events))
