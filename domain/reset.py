"""Password reset requests of one user: the ``reset-user:<user_id>`` stream.

The stream is the consistency boundary for supersession, the cooldown, the
hourly limit and idempotency receipts, so every rule here reads one folded
``ResetState`` and returns a ``Decision``; nothing is written by this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from uuid import UUID

from attrs import evolve, field, frozen

from domain.decisions import (
    ConsumeOutcome,
    CountingRun,
    Decision,
    KEPT_FOR,
    IdempotencyKeyBound,
    Rejected,
    PastRequest,
    Receipt,
    RequestOutcome,
    RequestsCounted,
    bind_key_to_reuse,
    check_request_input,
    count_floods,
    count_rejections,
    kept_receipts,
    replay_receipt,
    require_utc,
    rejections_after,
    reuse_or_refuse,
    run_after,
)
from domain.email import EmailQueued
from domain.errors import TokenInvalid, UnknownEventType
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

RESET_LINK = "reset_link"
PASSWORD_CHANGED = "password_changed"


def reset_stream(user_id: str) -> str:
    """The stream id holding this user's reset requests."""
    return f"reset-user:{user_id}"


@frozen
class ResetRequested:
    request_id: UUID
    user_id: str
    recipient: str
    key_id: str  # the key that derives the token; the token itself is never stored
    token_hash: str
    requested_at: datetime
    expires_at: datetime
    message_id: UUID
    idempotency_key: str | None
    client: str | None
    # "<key id>:<hex HMAC>" of the normalised recipient, so a reviewer can find
    # the user by address (infra/services/address_index.py); a personal field,
    # erased with the recipient. None on events from before it existed.
    address_hmac: str | None = None
    # How the token is derived (domain.tokens): 1 from key and request id alone,
    # 2 also from ``nonce``, a secret sealed under the user's data key (a personal field).
    derivation: int = 1
    nonce: str | None = field(default=None, repr=False)


@frozen
class ResetSuperseded:
    request_id: UUID
    superseded_by: UUID | None
    reason: str  # "new_request" or "password_changed"


@frozen
class ResetRequestRefused:
    user_id: str
    reason: str  # "rate_limited"
    refused_at: datetime
    retry_at: datetime


@frozen
class ResetCompleted:
    request_id: UUID
    user_id: str
    completed_at: datetime
    notice_message_id: UUID


@frozen
class ResetTokenRejected:
    """A known reset link was presented when it could no longer be used; it was refused.

    ``reason``: "used", "superseded", "expired" or "erased". Bounded per window
    (``domain.decisions.count_rejections``); the caller is in the event's metadata.
    """

    request_id: UUID
    reason: str
    rejected_at: datetime


@frozen
class RequestReset:
    """Ask for a reset link for ``user_id`` of ``tenant``, sent to ``recipient``."""

    user_id: str  # the tenant's own id for the user; events carry ``scoped_user_id``
    recipient: str
    idempotency_key: str | None = None
    client: str | None = None
    tenant: str = DEFAULT_TENANT

    def __attrs_post_init__(self) -> None:
        check_request_input(self.user_id, self.recipient, self.idempotency_key, self.client)
        check_tenant_name(self.tenant)

    @property
    def scoped_user_id(self) -> str:
        """The user as streams and events name them: two tenants' ``u1`` are two users."""
        return scoped_user(self.tenant, self.user_id)


@frozen
class ResetRequest:
    """One request's facts and where it stands: "open", "superseded" or "completed"."""

    request_id: UUID
    user_id: str
    recipient: str
    key_id: str
    token_hash: str
    requested_at: datetime
    expires_at: datetime
    message_id: UUID
    idempotency_key: str | None
    client: str | None
    status: str = "open"
    superseded_by: UUID | None = None
    completed_at: datetime | None = None
    derivation: int = 1
    nonce: str | None = field(default=None, repr=False)

    def past(self) -> PastRequest:
        """This request as the shared request rules see it."""
        outcome = RequestOutcome(self.request_id, self.message_id, self.expires_at, reused=False)
        return PastRequest(outcome, self.requested_at, (self.recipient,), self.status == "open")


@frozen
class ResetState:
    """Everything the reset rules need from one user's stream."""

    requests: Mapping[UUID, ResetRequest]  # in request order
    by_token_hash: Mapping[str, UUID]
    # (client, idempotency_key) -> the request it last created or was bound to.
    receipts: Mapping[tuple[str | None, str], Receipt]
    # The run of alike answers (refusals, bound repeats) the last events belong to: floods are counted.
    run: CountingRun | None = None
    # Rejected presentations written in the latest window they were written in: past a bound they are counted.
    rejections: CountingRun | None = None


def initial_reset_state() -> ResetState:
    """The state of a stream with no events."""
    return ResetState(requests={}, by_token_hash={}, receipts={})


def _with_request(state: ResetState, request: ResetRequest) -> ResetState:
    return evolve(state, requests={**state.requests, request.request_id: request})


def evolve_reset(state: ResetState, event: object) -> ResetState:
    """The state after ``event``. Events about unknown requests change nothing,
    so a replay never fails half-way."""
    if isinstance(event, ResetTokenRejected):
        # Neither ends nor extends a run of refusals: presentations are bounded on their own.
        return evolve(state, rejections=rejections_after(state.rejections, event.rejected_at))
    run = run_after(state.run, event, ResetRequestRefused)
    if run != state.run:
        state = evolve(state, run=run)
    return _evolve_requests(state, event)


def _evolve_requests(state: ResetState, event: object) -> ResetState:
    if isinstance(event, ResetRequested):
        request = ResetRequest(
            event.request_id, event.user_id, event.recipient, event.key_id, event.token_hash,
            event.requested_at, event.expires_at, event.message_id, event.idempotency_key,
            event.client, derivation=event.derivation, nonce=event.nonce,
        )  # fmt: skip
        state = evolve(
            _with_request(state, request),
            by_token_hash={**state.by_token_hash, event.token_hash: event.request_id},
        )
        if event.idempotency_key is not None:
            receipt = Receipt(event.request_id, event.requested_at)
            state = _with_receipt(state, event.client, event.idempotency_key, receipt)
        return _forget_before(state, event.requested_at - KEPT_FOR)
    if isinstance(event, IdempotencyKeyBound):
        receipt = Receipt(event.request_id, event.bound_at)
        return _with_receipt(state, event.client, event.idempotency_key, receipt)
    if isinstance(event, ResetSuperseded):
        request = state.requests.get(event.request_id)
        if request is None or request.status != "open":
            return state
        return _with_request(
            state, evolve(request, status="superseded", superseded_by=event.superseded_by)
        )
    if isinstance(event, ResetCompleted):
        request = state.requests.get(event.request_id)
        if request is None:
            return state
        return _with_request(
            state, evolve(request, status="completed", completed_at=event.completed_at)
        )
    if isinstance(event, (ResetRequestRefused, RequestsCounted)):
        return state
    raise UnknownEventType(f"{type(event).__name__} is not an event of a reset stream")


def _forget_before(state: ResetState, horizon: datetime) -> ResetState:
    """Forget closed requests made before ``horizon`` and receipts created before it (see ``KEPT_FOR``).

    Done when a request is made, so that a fold and a snapshot forget alike.
    A request an unlapsed receipt names, or one still open, is kept.
    """
    receipts = kept_receipts(state.receipts, horizon)
    named = {receipt.request_id for receipt in receipts.values()}
    requests = {request_id: r for request_id, r in state.requests.items()
                if r.status == "open" or r.requested_at >= horizon or request_id in named}
    if len(requests) == len(state.requests) and len(receipts) == len(state.receipts):
        return state
    by_token_hash = {token_hash: i for token_hash, i in state.by_token_hash.items() if i in requests}
    return evolve(state, requests=requests, by_token_hash=by_token_hash, receipts=receipts)


def _with_receipt(state: ResetState, client: str | None, key: str, receipt: Receipt) -> ResetState:
    return evolve(state, receipts={**state.receipts, (client, key): receipt})


def fold_reset(events: Iterable[object], state: ResetState | None = None) -> ResetState:
    """The state after all ``events``, oldest first, from ``state`` (a snapshot) or the start."""
    state = state if state is not None else initial_reset_state()
    for event in events:
        state = evolve_reset(state, event)
    return state


def _open_requests(state: ResetState) -> list[ResetRequest]:
    return [r for r in state.requests.values() if r.status == "open"]


def _receipt(state: ResetState, client: str | None, key: str | None) -> PastRequest | None:
    receipt = state.receipts.get((client, key)) if key is not None else None
    request = state.requests.get(receipt.request_id) if receipt is not None else None
    if receipt is None or request is None:
        return None
    return evolve(request.past(), created_at=receipt.created_at)


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
    first = _receipt(state, cmd.client, cmd.idempotency_key)
    replay = replay_receipt(first, params, now=now, receipt_ttl=policy.receipt_ttl)
    if replay is not None:
        return replay
    early = reuse_or_refuse(
        [r.past() for r in state.requests.values()],
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
        return count_floods(early, state.run, flow="reset", user_id=cmd.scoped_user_id, client=cmd.client, now=now)

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
    )
    superseded = tuple(
        ResetSuperseded(r.request_id, superseded_by=request_id, reason="new_request")
        for r in _open_requests(state)
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
    if request.status == "superseded":
        return "superseded"
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
        raise TokenInvalid(LINK_REFUSALS[reason])
    return request


def _known_link(state: ResetState, token_hash: str, *, now: datetime, client: str | None) -> ResetRequest | Decision:
    """The usable request of a link, or the decision recording its refusal; ``TokenInvalid`` when unknown."""
    require_utc(now)
    request = find_by_token_hash(state, token_hash)
    if request is None:
        # Unknown (or long forgotten): nothing to tie a record to, and writing one would let anyone fill the log.
        raise TokenInvalid("The reset link is not valid.")
    reason = link_rejection(request, now=now)
    if reason is None:
        return request
    rejected = Decision(events=(ResetTokenRejected(request.request_id, reason, now),), emails=(),
                        outcome=Rejected(reason, LINK_REFUSALS[reason]))
    return count_rejections(rejected, state.rejections, flow="reset", user_id=request.user_id, client=client, now=now)


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
        for r in _open_requests(state)
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
    "unknown_request", "superseded", "consumed" or "expired" (and
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
    if request.status == "superseded":
        return "superseded"
    if request.status == "completed":
        return "consumed"
    if now >= request.expires_at:
        return "expired"
    return None
