"""Password reset requests of one user: the ``reset-user:<user_id>`` stream.

The stream is the consistency boundary for supersession, the cooldown, the
hourly limit and idempotency receipts, so every rule here reads one folded
``ResetState`` and returns a ``Decision``; nothing is written by this module.

The events are in ``domain.reset_events``, the fold in ``domain.reset_state``.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from attrs import field, frozen

from domain.counting import count_floods, count_rejections
from domain.decisions import (
    ConsumeOutcome,
    Decision,
    Rejected,
    RequestOutcome,
)
from domain.input_checks import check_request_input, require_utc
from domain.locales import optional_locale
from domain.request_rules import (
    bind_key_to_reuse,
    replay_receipt,
    reuse_or_refuse,
)
from domain.email import EmailQueued
from domain.errors import TokenInvalid
from domain.policy import ResetPolicy
from domain.tenants import DEFAULT_TENANT, check_tenant_name, scoped_user
from domain.tokens import (
    CURRENT_DERIVATION,
    TokenKeys,
    derivation_nonce,
    derive_reset_token,
    hash_token,
    nonce_readable,
)
from domain.reset_events import ResetCompleted, ResetRequestRefused, ResetRequested, ResetSuperseded, ResetTokenRejected
from domain.reset_state import ResetRequest, ResetState, open_requests, receipt_request
from domain.reset_events import PASSWORD_CHANGED, RESET_LINK


@frozen
class RequestReset:
    """Ask for a reset link for ``user_id`` of ``tenant``, sent to ``recipient``."""

    user_id: str  # the tenant's own id for the user; events carry ``scoped_user_id``
    recipient: str
    idempotency_key: str | None = None
    client: str | None = None
    tenant: str = DEFAULT_TENANT
    # The end user's language (BCP 47), in its conventional case; the email is written in the best match.
    locale: str | None = field(default=None, converter=optional_locale)

    def __attrs_post_init__(self) -> None:
        check_request_input(self.user_id, self.recipient, self.idempotency_key, self.client)
        check_tenant_name(self.tenant)

    @property
    def scoped_user_id(self) -> str:
        """The user as streams and events name them: two tenants' ``u1`` are two users."""
        return scoped_user(self.tenant, self.user_id)


def decide_reset_request(
    state: ResetState,
    cmd: RequestReset,
    *,
    now: datetime,
    request_id: UUID,
    message_id: UUID,
    nonce: str,
    keys: TokenKeys,
    policy: ResetPolicy,
    address_hmac: str | None = None,
) -> Decision:
    """Decide a reset request, rules in order: (a) an idempotency receipt
    replays the first outcome, or raises ``IdempotencyMismatch`` for another
    recipient; (b) a repeat within the cooldown reuses the open request; (c)
    the hourly limit refuses; (d) a new request supersedes every open one and
    queues a reset link. A key answered by (b) is bound to the reused request.
    ``nonce`` is the new request's secret (random, from the caller): its token
    is derived from the key, the request id and the nonce."""
    require_utc(now)
    params = (cmd.recipient,)
    first = receipt_request(state, cmd.client, cmd.idempotency_key)
    replay = replay_receipt(first, params, now=now, receipt_ttl=policy.receipt_ttl)
    if replay is not None:
        return replay
    early = reuse_or_refuse(
        [r.past() for r in open_requests(state)],
        state.request_times,
        params,
        now=now,
        cooldown=policy.cooldown,
        hourly_limit=policy.hourly_limit,
        refusal=lambda retry_at: ResetRequestRefused(cmd.scoped_user_id, "rate_limited", now, retry_at),
    )
    if early is not None:
        early = bind_key_to_reuse(
            early, flow="reset", user_id=cmd.scoped_user_id, client=cmd.client,
            idempotency_key=cmd.idempotency_key, now=now,
        )  # fmt: skip
        return count_floods(early, state.run, state.flood, flow="reset", user_id=cmd.scoped_user_id,
                            client=cmd.client, now=now)

    token = derive_reset_token(keys.current, request_id, nonce)
    requested = ResetRequested(
        request_id=request_id,
        user_id=cmd.scoped_user_id,
        recipient=cmd.recipient,
        key_id=keys.current_id,
        token_hash=hash_token(token),
        requested_at=now,
        expires_at=now + policy.ttl,
        message_id=message_id,
        idempotency_key=cmd.idempotency_key,
        client=cmd.client,
        address_hmac=address_hmac,
        derivation=CURRENT_DERIVATION,
        nonce=nonce,
        locale=cmd.locale,
    )
    superseded = tuple(
        ResetSuperseded(r.request_id, superseded_by=request_id, reason="new_request")
        for r in open_requests(state)
    )
    email = EmailQueued(
        message_id, "reset", RESET_LINK, cmd.scoped_user_id, request_id, cmd.recipient, available_at=now
    )
    return Decision(
        events=(*superseded, requested),
        emails=(email,),
        outcome=RequestOutcome(request_id, message_id, requested.expires_at, reused=False),
    )


def reset_token_for(request: ResetRequest, keys: TokenKeys) -> str:
    """Re-derive a request's token (for the worker rendering the link).

    ``SecretUnavailable`` when its nonce was erased: no one can derive it any more.
    """
    nonce = derivation_nonce(request.derivation, request.nonce)
    return derive_reset_token(keys.key(request.key_id), request.request_id, nonce)


def find_by_token_hash(state: ResetState, token_hash: str) -> ResetRequest | None:
    """The request whose token hashes to ``token_hash``, whatever its status."""
    # A dict lookup is not constant-time, but the key is the SHA-256 of a
    # 256-bit token: timing reveals nothing an attacker could steer.
    request_id = state.by_token_hash.get(token_hash)
    return state.requests.get(request_id) if request_id is not None else None


# The answer to a known link that can no longer be used, by reason. An erased
# user's link is answered as an unknown one: erasure leaves nothing to tell.
LINK_REFUSALS = {
    "erased": "The reset link is not valid.",
    "used": "The reset link was already used.",
    "superseded": "The reset link was replaced by a newer one or is no longer valid.",
    "invalidated": "The reset link was withdrawn by support.",
    "expired": "The reset link has expired.",
}


@frozen
class LinkValid:
    """A link presented while its request is open and unexpired."""

    request: ResetRequest


def link_rejection(request: ResetRequest, *, now: datetime) -> str | None:
    """Why this request's link can no longer be used (a key of ``LINK_REFUSALS``), or None when it can."""
    if not nonce_readable(request.derivation, request.nonce):
        return "erased"
    if request.status == "completed":
        return "used"
    if request.status in ("superseded", "invalidated"):
        return request.status
    if now >= request.expires_at:
        return "expired"
    return None


def check_token(state: ResetState, token_hash: str, *, now: datetime) -> ResetRequest:
    """The open, unexpired request for this token; ``TokenInvalid`` otherwise.

    Error messages name the reason but never the token or its hash. Reads
    only; ``decide_verify_link`` is the same check that records a refusal.
    """
    require_utc(now)
    request = find_by_token_hash(state, token_hash)
    if request is None:
        raise TokenInvalid("The reset link is not valid.")
    reason = link_rejection(request, now=now)
    if reason is not None:
        raise TokenInvalid(LINK_REFUSALS[reason], reason=reason)
    return request


def _known_link(state: ResetState, token_hash: str, *, now: datetime, client: str | None) -> ResetRequest | Decision:
    """The usable request of a link, or the decision recording its refusal; ``TokenInvalid`` when unknown."""
    require_utc(now)
    request = find_by_token_hash(state, token_hash)
    if request is None:
        # Unknown: nothing to tie a record to, and writing one would let anyone fill the log.
        raise TokenInvalid("The reset link is not valid.")
    reason = link_rejection(request, now=now)
    if reason is None:
        return request
    rejected = Decision(events=(ResetTokenRejected(request.request_id, reason, now),), emails=(),
                        outcome=Rejected(reason, LINK_REFUSALS[reason]))
    return count_rejections(rejected, state.rejections, state.flood, flow="reset", user_id=request.user_id,
                            client=client, now=now)


def decide_verify_link(state: ResetState, token_hash: str, *, now: datetime, client: str | None = None) -> Decision:
    """Check a link without consuming it: ``LinkValid`` writing nothing, or a recorded ``Rejected``.

    ``TokenInvalid`` (nothing written) for a token no request of the stream knows.
    """
    found = _known_link(state, token_hash, now=now, client=client)
    if isinstance(found, Decision):
        return found
    return Decision(events=(), emails=(), outcome=LinkValid(found))


def decide_consume(
    state: ResetState, token_hash: str, *, now: datetime, notice_message_id: UUID, client: str | None = None
) -> Decision:
    """Consume a token once: complete its request, supersede every other open
    request, and queue a "password changed" notice. ``TokenInvalid`` when the
    token is unknown; a recorded ``Rejected`` when it is expired, superseded,
    already used or erased."""
    found = _known_link(state, token_hash, now=now, client=client)
    if isinstance(found, Decision):
        return found
    request = found
    others = tuple(
        ResetSuperseded(r.request_id, superseded_by=None, reason="password_changed")
        for r in open_requests(state)
        if r.request_id != request.request_id
    )
    completed = ResetCompleted(request.request_id, request.user_id, now, notice_message_id)
    notice = EmailQueued(
        notice_message_id, "reset", PASSWORD_CHANGED, request.user_id, request.request_id,
        request.recipient, available_at=now,
    )  # fmt: skip
    return Decision(
        events=(completed, *others),
        emails=(notice,),
        outcome=ConsumeOutcome(request.request_id, request.user_id, now),
    )


def reset_delivery_verdict(
    state: ResetState, request_id: UUID, *, now: datetime, template: str
) -> str | None:
    """None when the worker should send this email now, else why to skip it:
    "unknown_request", "superseded", "invalidated", "consumed" or "expired" (and
    "not_completed" for a notice whose request was never completed)."""
    require_utc(now)
    request = state.requests.get(request_id)
    if request is None:
        return "unknown_request"
    if template == PASSWORD_CHANGED:
        # The notice tells the owner their password changed: it never goes
        # stale, however late it is delivered.
        return None if request.status == "completed" else "not_completed"
    if template != RESET_LINK:
        raise ValueError(f"{template!r} is not a reset email template")
    if request.status in ("superseded", "invalidated"):
        return request.status
    if request.status == "completed":
        return "consumed"
    if now >= request.expires_at:
        return "expired"
    return None
