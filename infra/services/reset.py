"""Password reset: request a link, verify a token, consume it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select

from domain.decisions import ConsumeOutcome, Refused, RequestOutcome
from domain.errors import TokenInvalid
from infra.errors import RateLimited
from domain.reset import (
    RequestReset,
    ResetRequest,
    check_token,
    decide_consume,
    decide_reset_request,
    fold_reset,
    reset_stream,
)
from domain.tenants import DEFAULT_TENANT, tenant_of
from domain.tokens import hash_token
from infra.db import tables
from infra.services.address_index import address_hmac
from infra.services.unit_of_work import IdempotencyLock, InFlight, ServiceContext, decide_on_stream, load_state

# A token is 32 bytes of HMAC in base64url without padding: 43 characters.
TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]{43}")


def request_reset(
    ctx: ServiceContext, cmd: RequestReset, metadata: Mapping[str, Any] | None = None, *,
    in_flight: InFlight = "wait",
) -> RequestOutcome:
    """Issue (or reuse) a reset request and queue its email; ``RateLimited`` past the hourly limit.

    A replayed idempotency key answers the first outcome; another recipient
    under the same key is ``IdempotencyMismatch``. While a request with the
    same key runs, ``in_flight`` says whether to "wait" for it or "refuse"
    with ``RequestInFlight``.
    """
    lock = IdempotencyLock.for_request("reset", cmd.client, cmd.scoped_user_id, cmd.idempotency_key, in_flight)
    request_id, message_id = ctx.new_id(), ctx.new_id()
    decision = decide_on_stream(
        ctx, reset_stream(cmd.scoped_user_id), fold_reset,
        lambda state, now: decide_reset_request(
            state, cmd, now=now, request_id=request_id, message_id=message_id,
            keys=ctx.keys, policy=ctx.reset_policy, address_hmac=address_hmac(ctx.keys, cmd.recipient),
        ),
        metadata,
        idempotency_lock=lock,
    )
    if isinstance(decision.outcome, Refused):
        raise RateLimited(
            f"too many reset emails for this user; retry after {decision.outcome.retry_at.isoformat()}",
            retry_at=decision.outcome.retry_at,
        )
    return decision.outcome


def _user_of_token(ctx: ServiceContext, token: str, tenant: str) -> tuple[str, str]:
    """The (scoped) user whose request this token is, and the token's hash.

    Another tenant's token is answered exactly as a token that does not exist:
    the same words, before anything is read from the user's stream or written.
    """
    if not TOKEN_SHAPE.fullmatch(token):
        raise TokenInvalid("The reset link is not valid.")
    token_hash = hash_token(token)
    query = select(tables.reset_tokens.c.user_id).where(tables.reset_tokens.c.token_hash == token_hash)
    with ctx.engine.connect() as connection:
        user_id = connection.execute(query).scalar()
    if user_id is None or tenant_of(user_id) != tenant:
        raise TokenInvalid("The reset link is not valid.")
    return user_id, token_hash


def verify_token(ctx: ServiceContext, token: str, *, tenant: str = DEFAULT_TENANT) -> ResetRequest:
    """The open request this token belongs to, without consuming it; ``TokenInvalid`` otherwise.

    The request's ``user_id`` is the scoped id (``domain.tenants``).
    """
    user_id, token_hash = _user_of_token(ctx, token, tenant)
    state = load_state(ctx, reset_stream(user_id), fold_reset)
    return check_token(state, token_hash, now=ctx.clock.now())


def consume_token(
    ctx: ServiceContext, token: str, metadata: Mapping[str, Any] | None = None, *, tenant: str = DEFAULT_TENANT
) -> ConsumeOutcome:
    """Use the token once: complete the reset, supersede the rest, queue a "password changed" notice.

    ``TokenInvalid`` (nothing written) for a token of another tenant, as for an unknown one.
    """
    user_id, token_hash = _user_of_token(ctx, token, tenant)
    notice_id = ctx.new_id()
    decision = decide_on_stream(
        ctx, reset_stream(user_id), fold_reset,
        lambda state, now: decide_consume(state, token_hash, now=now, notice_message_id=notice_id),
        metadata,
    )
    return decision.outcome
