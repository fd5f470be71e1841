"""Password reset: request a link, verify a token, consume it.

A known link presented when it can no longer be used (used, superseded,
expired, its user erased) is refused as before, and the refusal is recorded
on its request's stream with the caller's metadata (``ResetTokenRejected``,
counted past a bound per window). An unknown token writes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, bindparam, select

from domain.decisions import ConsumeOutcome, Decision, Refused, Rejected, RequestOutcome
from domain.errors import TokenInvalid
from domain.limits import Quota
from domain.request_rules import RATE_WINDOW
from infra.errors import RateLimited
from domain.reset import LinkValid, RequestReset, decide_consume, decide_reset_request, decide_verify_link
from domain.reset_events import reset_stream
from domain.reset_state import ResetRequest, fold_reset
from domain.tenants import DEFAULT_TENANT, tenant_of
from domain.tokens import hash_token
from infra.db import tables
from infra.services.address_index import address_hmac
from infra.services.locks import IdempotencyLock, InFlight
from infra.services.send_limits import send_admission, verify_admission
from infra.services.tenants import TenantRules
from infra.services.suppressions import suppression_admission
from infra.projector.snapshots import Lookups, receipt_lookup
from infra.services.unit_of_work import ServiceContext, StreamOf, decide_on_stream

# A token is 32 bytes of HMAC in base64url without padding: 43 characters.
TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]{43}")
# Built once: verify and consume look a token up on every request.
USER_OF_TOKEN = select(tables.reset_tokens.c.user_id).where(
    tables.reset_tokens.c.token_hash == bindparam("token_hash"))


def request_reset(
    ctx: ServiceContext, cmd: RequestReset, metadata: Mapping[str, Any] | None = None, *,
    in_flight: InFlight = "wait", client_ip: str | None = None,
) -> RequestOutcome:
    """Issue (or reuse) a reset request and queue its email; ``RateLimited`` past the hourly limit, or past a
    limit of the address or of the end user's ``client_ip`` (``domain.send_limits``: nothing is written).

    A replayed idempotency key answers the first outcome; another recipient
    under the same key is ``IdempotencyMismatch``. While a request with the
    same key runs, ``in_flight`` says whether to "wait" for it or "refuse"
    with ``RequestInFlight``.
    """
    address_hash = address_hmac(ctx.keys, cmd.recipient)  # for the address index and the address's limit
    # The deployment's rules with the tenant's overrides, read with the stream: no wait of their own.
    rules = TenantRules(ctx, cmd.tenant)
    admit = send_admission(ctx.keys, lambda: (rules.policies().send_limits, rules.policies().reset.hourly_limit),
                           flow="reset", tenant=cmd.tenant, scoped_user_id=cmd.scoped_user_id,
                           address_hash=address_hash, client_ip=client_ip)
    lock = IdempotencyLock.for_request("reset", cmd.client, cmd.scoped_user_id, cmd.idempotency_key, in_flight)
    request_id, message_id, nonce = ctx.new_id(), ctx.new_id(), ctx.new_nonce()
    decision = decide_on_stream(
        ctx, rules.asked_with(reset_stream(cmd.scoped_user_id)), fold_reset,
        rules.before(lambda state, now, policies: decide_reset_request(
            state, cmd, now=now, request_id=request_id, message_id=message_id, nonce=nonce,
            keys=ctx.keys, policy=policies.reset, address_hmac=address_hash,
        )),
        metadata,
        idempotency_lock=lock,
        lookups=receipt_lookup(cmd.client, cmd.idempotency_key),
        admit=suppression_admission(ctx.keys, tenant=cmd.tenant, recipient=cmd.recipient, then=admit),
    )
    if isinstance(decision.outcome, Refused):
        raise RateLimited(
            f"too many reset emails for this user; retry after {decision.outcome.retry_at.isoformat()}",
            retry_at=decision.outcome.retry_at, quota=Quota("per-user", rules.policies().reset.hourly_limit,
                                                             RATE_WINDOW),
        )
    assert isinstance(decision.outcome, RequestOutcome)  # decide_reset_request answers with one or refuses
    return decision.outcome


def _hash_of(token: str) -> str:
    """The hash of a well-formed token; ``TokenInvalid`` for any other text."""
    if not TOKEN_SHAPE.fullmatch(token):
        raise TokenInvalid("The reset link is not valid.")
    return hash_token(token)


def _stream_of_token(token_hash: str, tenant: str) -> StreamOf:
    """The reset stream of the (scoped) user whose request this token is, looked up in the decision's transaction.

    Another tenant's token is answered exactly as a token that does not exist:
    the same words, before anything is read from the user's stream or written.
    """
    def stream_of(connection: Connection) -> str:
        user_id = connection.execute(USER_OF_TOKEN, {"token_hash": token_hash}).scalar()
        if user_id is None or tenant_of(user_id) != tenant:
            raise TokenInvalid("The reset link is not valid.")
        return reset_stream(user_id)

    return stream_of


def _client(metadata: Mapping[str, Any] | None) -> str | None:
    client = (metadata or {}).get("client")
    return client if isinstance(client, str) else None


def _answered(decision: Decision) -> Any:
    """The decision's outcome; ``TokenInvalid`` with the usual words and the reason's code once a rejected
    presentation is recorded."""
    if isinstance(decision.outcome, Rejected):
        raise TokenInvalid(decision.outcome.message, reason=decision.outcome.reason)
    return decision.outcome


def verify_token(
    ctx: ServiceContext, token: str, metadata: Mapping[str, Any] | None = None, *, tenant: str = DEFAULT_TENANT,
    client_ip: str | None = None,
) -> ResetRequest:
    """The open request this token belongs to, without consuming it; ``TokenInvalid`` otherwise.

    The request's ``user_id`` is the scoped id (``domain.tenants``); a token of
    another tenant is answered as an unknown one, and nothing is written.

    Decided on the locked stream like a consumption, so that a rejected
    presentation of a known link is recorded (and counted past its bound).
    With ``client_ip``, ``RateLimited`` (nothing written) past that IP's checks this hour.
    """
    token_hash = _hash_of(token)
    admit = verify_admission(ctx.keys, ctx.send_limits, tenant=tenant, client_ip=client_ip)
    decision = decide_on_stream(
        ctx, _stream_of_token(token_hash, tenant), fold_reset,
        lambda state, now: decide_verify_link(state, token_hash, now=now, client=_client(metadata)),
        metadata,
        lookups=Lookups(token_hash=token_hash),
        admit=admit,
    )
    valid = _answered(decision)
    assert isinstance(valid, LinkValid)
    return valid.request


def consume_token(
    ctx: ServiceContext, token: str, metadata: Mapping[str, Any] | None = None, *, tenant: str = DEFAULT_TENANT,
    client_ip: str | None = None,
) -> ConsumeOutcome:
    """Use the token once: complete the reset, supersede the rest, queue a "password changed" notice.

    ``TokenInvalid`` (nothing written) for a token of another tenant, as for an unknown one. With
    ``client_ip``, ``RateLimited`` (nothing written) past that IP's checks this hour.
    """
    token_hash = _hash_of(token)
    admit = verify_admission(ctx.keys, ctx.send_limits, tenant=tenant, client_ip=client_ip)
    notice_id = ctx.new_id()
    decision = decide_on_stream(
        ctx, _stream_of_token(token_hash, tenant), fold_reset,
        lambda state, now: decide_consume(
            state, token_hash, now=now, notice_message_id=notice_id, client=_client(metadata)),
        metadata,
        lookups=Lookups(token_hash=token_hash),
        admit=admit,
    )
    consumed: ConsumeOutcome = _answered(decision)
    return consumed
