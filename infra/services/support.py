"""Support actions on a user of a tenant: withdraw their open links and codes, or send them a fresh one.

``invalidate_user`` closes every open, unexpired reset request and OTP
challenge of the user (``ResetInvalidated``, ``OtpChallengeInvalidated``,
with support's reason), each flow on its own stream under that stream's
lock, as any decision: a link or code presented afterwards is refused with
reason "invalidated", and an email of theirs still queued is skipped by the
worker's fresh read. A user with nothing open, known or not, is answered
alike: nothing withdrawn, nothing written. User ids are the tenant's own,
scoped with the caller's tenant here, so no caller reaches another
tenant's user.

``resend`` makes a new request on the user's behalf, to the address of the
user's latest request (authledger keeps addresses only sealed on requests;
the application owns its users): an ordinary ``request_reset`` or
``request_otp``, under every limit a create meets, its metadata naming the
support action and reason beside the caller.

The HTTP API (``POST /v1/users/{user_id}/invalidation`` and ``/resend``),
``authledger users`` and the console's case page call these.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from attrs import frozen

from domain.decisions import RequestOutcome
from domain.errors import InvalidInput, NotFound
from domain.otp import RequestOtp
from domain.otp_events import OtpChallengeIssued, otp_stream
from domain.otp_state import fold_otp
from domain.privacy import subject_of
from domain.reset import RequestReset
from domain.reset_events import ResetRequested, reset_stream
from domain.reset_state import fold_reset
from domain.support import (
    Withdrawn, check_flow, decide_otp_invalidation, decide_reset_invalidation, support_metadata, support_reason,
)
from infra.eventlog.personal_data import ERASED
from infra.logs import log_event
from infra.eventlog.postgres import PostgresEventStore
from infra.services.otp import request_otp
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext, decide_on_stream

log = logging.getLogger("authledger.support")


@frozen
class Invalidation:
    """What an invalidation withdrew: the ids of the reset requests and OTP challenges that were open."""

    user_id: str  # as the tenant knows them
    request_ids: tuple[str, ...]
    challenge_ids: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"user_id": self.user_id, "invalidated_links": len(self.request_ids),
                "invalidated_codes": len(self.challenge_ids), "request_ids": list(self.request_ids),
                "challenge_ids": list(self.challenge_ids)}


@frozen
class Resent:
    """The request made on the user's behalf (or the open one a repeat within the cooldown was answered with)."""

    user_id: str
    flow: str
    outcome: RequestOutcome

    def as_dict(self) -> dict[str, Any]:
        id_name = "request_id" if self.flow == "reset" else "challenge_id"
        return {"user_id": self.user_id, "flow": self.flow, id_name: str(self.outcome.request_id),
                "message_id": str(self.outcome.message_id), "expires_at": self.outcome.expires_at.isoformat(),
                "reused": self.outcome.reused}


def invalidate_user(
    ctx: ServiceContext, tenant: str, user_id: str, *, reason: str, metadata: Mapping[str, Any] | None = None,
) -> Invalidation:
    """Withdraw every open link and code of ``user_id`` of ``tenant``; ``InvalidInput`` (nothing written) for
    a malformed user id or a blank reason, or one holding an address."""
    scoped, reason = subject_of(tenant, user_id), support_reason(reason)
    metadata = {**(metadata or {}), "support_action": "invalidate"}
    links = decide_on_stream(ctx, reset_stream(scoped), fold_reset,
                             lambda state, now: decide_reset_invalidation(state, reason=reason, now=now), metadata)
    codes = decide_on_stream(ctx, otp_stream(scoped), fold_otp,
                             lambda state, now: decide_otp_invalidation(state, reason=reason, now=now), metadata)
    assert isinstance(links.outcome, Withdrawn) and isinstance(codes.outcome, Withdrawn)
    log_event(log, "open links and codes withdrawn by support", user_id=scoped, links=len(links.outcome.request_ids),
              codes=len(codes.outcome.request_ids), actor=metadata.get("actor"))
    return Invalidation(user_id, tuple(map(str, links.outcome.request_ids)),
                        tuple(map(str, codes.outcome.request_ids)))


def resend(
    ctx: ServiceContext, tenant: str, user_id: str, *, flow: str, reason: str, purpose: str | None = None,
    client: str | None = None, metadata: Mapping[str, Any] | None = None,
) -> Resent:
    """A fresh link (``flow`` "reset") or code ("otp", for ``purpose``, default "login") for ``user_id`` of
    ``tenant``, to the address of their latest request.

    Refused with nothing written: ``InvalidInput`` for a bad flow, purpose or reason; ``NotFound`` for a user
    with no request to take an address from, or whose address was erased; and whatever a create refuses
    (``RateLimited``, ``PurposeUnknown``, ``LockedOut``).
    """
    flow, reason = check_flow(flow), support_reason(reason)
    if flow == "reset" and purpose is not None:
        raise InvalidInput("a purpose is for a one-time code (flow 'otp'); a reset link has none")
    scoped = subject_of(tenant, user_id)
    recipient = latest_address(ctx, scoped)
    metadata = support_metadata(metadata or {}, reason, "resend")
    if flow == "reset":
        outcome = request_reset(ctx, RequestReset(user_id, recipient, client=client, tenant=tenant), metadata)
    else:
        outcome = request_otp(ctx, RequestOtp(user_id, recipient, purpose or "login", client=client, tenant=tenant),
                              metadata)
    log_event(log, "fresh link or code sent by support", user_id=scoped, flow=flow, request_id=outcome.request_id,
              reused=outcome.reused, actor=metadata.get("actor"))
    return Resent(user_id, flow, outcome)


def latest_address(ctx: ServiceContext, scoped_user_id: str) -> str:
    """The recipient of the user's latest reset request or OTP challenge, opened under their data key.

    Reads both streams whole: a support action is rare, and a stream grows by a bounded number of events an
    hour (``domain.stream_growth``). ``NotFound`` when there is none, or the user's data was erased.
    """
    streams = {reset_stream(scoped_user_id): 0, otp_stream(scoped_user_id): 0}
    with ctx.engine.connect() as connection:
        loaded = PostgresEventStore(connection).load_many(streams)
    made = [r for history in loaded.values() for r in history
            if isinstance(r.event, ResetRequested | OtpChallengeIssued)]
    if not made:
        raise NotFound("no request of this user is on record to take an address from; nothing was sent")
    recipient = max(made, key=lambda r: r.global_position).event.recipient
    if recipient == ERASED:
        raise NotFound("this user's address was erased with their personal data; nothing was sent")
    assert isinstance(recipient, str)
    return recipient
