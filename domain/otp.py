"""Email one-time-code challenges of one user: the ``otp-user:<user_id>`` stream.

Same shape as ``domain.reset``: fold the stream into ``OtpState``, decide, and
return a ``Decision``. On top of the request rules, wrong codes lock a
challenge after ``max_attempts`` and lock the whole flow, with a doubling
backoff, every ``account_lock_threshold`` consecutive failures. Only a
correct code resets that count; a new challenge does not, or an attacker
would request a fresh challenge every few guesses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from uuid import UUID

from attrs import evolve, field, frozen

from domain.decisions import (
    CountingRun,
    KEPT_FOR,
    Decision,
    IdempotencyKeyBound,
    PastRequest,
    Receipt,
    Rejected,
    RequestOutcome,
    VerifyOutcome,
    RequestsCounted,
    bind_key_to_reuse,
    check_request_input,
    check_text,
    count_floods,
    count_rejections,
    kept_receipts,
    rejections_after,
    replay_receipt,
    require_utc,
    reuse_or_refuse,
    run_after,
)
from domain.email import EmailQueued
from domain.errors import CodeRejected, InvalidInput, LockedOut, UnknownEventType
from domain.policy import OtpPolicy
from domain.tenants import DEFAULT_TENANT, check_tenant_name, scoped_user
from domain.tokens import (
    CURRENT_DERIVATION,
    TokenKeys,
    derivation_nonce,
    derive_otp_code,
    nonce_readable,
    otp_code_matches,
)

OTP_CODE = "otp_code"


def otp_stream(user_id: str) -> str:
    """The stream id holding this user's OTP challenges."""
    return f"otp-user:{user_id}"


@frozen
class OtpChallengeIssued:
    challenge_id: UUID
    user_id: str
    recipient: str
    key_id: str  # the key that derives the code; the code itself is never stored
    # The code's length, fixed at issue: changing the policy must not change
    # the code of a challenge already sent.
    digits: int
    purpose: str
    issued_at: datetime
    expires_at: datetime
    message_id: UUID
    idempotency_key: str | None
    client: str | None
    # "<key id>:<hex HMAC>" of the normalised recipient (infra/services/address_index.py);
    # a personal field, erased with the recipient. None on events from before it existed.
    address_hmac: str | None = None
    # How the code is derived (domain.tokens): 1 from key and challenge id alone,
    # 2 also from ``nonce``, a secret sealed under the user's data key (a personal field).
    derivation: int = 1
    nonce: str | None = field(default=None, repr=False)


@frozen
class OtpChallengeSuperseded:
    challenge_id: UUID
    superseded_by: UUID


@frozen
class OtpVerificationFailed:
    challenge_id: UUID
    attempt: int  # failures on this challenge so far, this one included
    consecutive_failures: int  # across challenges since the last success
    failed_at: datetime


@frozen
class OtpChallengeVerified:
    challenge_id: UUID
    verified_at: datetime


@frozen
class OtpChallengeLockedOut:
    challenge_id: UUID | None
    scope: str  # "challenge" or "account"
    locked_at: datetime
    until: datetime | None  # None: for good (a locked challenge never reopens)


@frozen
class OtpRequestRefused:
    user_id: str
    reason: str  # "rate_limited"
    refused_at: datetime
    retry_at: datetime


@frozen
class OtpCodeRejected:
    """A code was presented for a known challenge that could no longer be used; it was refused unchecked.

    ``reason``: "used", "superseded", "expired", "locked" or "erased". Bounded per
    window (``domain.decisions.count_rejections``); the caller is in the event's metadata.
    """

    challenge_id: UUID
    reason: str
    rejected_at: datetime


@frozen
class RequestOtp:
    """Ask for a one-time code for ``user_id`` of ``tenant``, sent to ``recipient``."""

    user_id: str  # the tenant's own id for the user; events carry ``scoped_user_id``
    recipient: str
    purpose: str = "login"
    idempotency_key: str | None = None
    client: str | None = None
    tenant: str = DEFAULT_TENANT

    def __attrs_post_init__(self) -> None:
        check_request_input(self.user_id, self.recipient, self.idempotency_key, self.client)
        check_text("purpose", self.purpose, max_length=64)
        check_tenant_name(self.tenant)

    @property
    def scoped_user_id(self) -> str:
        """The user as streams and events name them: two tenants' ``u1`` are two users."""
        return scoped_user(self.tenant, self.user_id)


@frozen
class OtpChallenge:
    """One challenge's facts and where it stands: "open", "superseded",
    "verified" or "locked"."""

    challenge_id: UUID
    user_id: str
    recipient: str
    key_id: str
    digits: int
    purpose: str
    issued_at: datetime
    expires_at: datetime
    message_id: UUID
    idempotency_key: str | None
    client: str | None
    status: str = "open"
    failures: int = 0
    derivation: int = 1
    nonce: str | None = field(default=None, repr=False)

    def past(self) -> PastRequest:
        """This challenge as the shared request rules see it."""
        outcome = RequestOutcome(self.challenge_id, self.message_id, self.expires_at, reused=False)
        params = (self.recipient, self.purpose)
        return PastRequest(outcome, self.issued_at, params, self.status == "open")


@frozen
class OtpState:
    """Everything the OTP rules need from one user's stream."""

    challenges: Mapping[UUID, OtpChallenge]  # in issue order
    # (client, idempotency_key) -> the challenge it last created or was bound to.
    receipts: Mapping[tuple[str | None, str], Receipt]
    consecutive_failures: int
    account_lockouts: int
    locked_until: datetime | None
    # The run of alike answers (refusals, bound repeats) the last events belong to: floods are counted.
    run: CountingRun | None = None
    # Rejected presentations written in the latest window they were written in: past a bound they are counted.
    rejections: CountingRun | None = None


def initial_otp_state() -> OtpState:
    """The state of a stream with no events."""
    return OtpState(
        challenges={}, receipts={}, consecutive_failures=0, account_lockouts=0, locked_until=None
    )


def _with_challenge(state: OtpState, challenge: OtpChallenge) -> OtpState:
    return evolve(state, challenges={**state.challenges, challenge.challenge_id: challenge})


def evolve_otp(state: OtpState, event: object) -> OtpState:
    """The state after ``event``. Events about unknown challenges change the
    challenge map not at all, so a replay never fails half-way."""
    if isinstance(event, OtpCodeRejected):
        # Neither ends nor extends a run of refusals: presentations are bounded on their own.
        return evolve(state, rejections=rejections_after(state.rejections, event.rejected_at))
    run = run_after(state.run, event, OtpRequestRefused)
    if run != state.run:
        state = evolve(state, run=run)
    return _evolve_challenges(state, event)


def _evolve_challenges(state: OtpState, event: object) -> OtpState:
    if isinstance(event, OtpChallengeIssued):
        challenge = OtpChallenge(
            event.challenge_id, event.user_id, event.recipient, event.key_id, event.digits,
            event.purpose, event.issued_at, event.expires_at, event.message_id, event.idempotency_key,
            event.client, derivation=event.derivation, nonce=event.nonce,
        )  # fmt: skip
        state = _with_challenge(state, challenge)
        if event.idempotency_key is not None:
            receipt = Receipt(event.challenge_id, event.issued_at)
            state = _with_receipt(state, event.client, event.idempotency_key, receipt)
        return _forget_before(state, event.issued_at - KEPT_FOR)
    if isinstance(event, IdempotencyKeyBound):
        receipt = Receipt(event.request_id, event.bound_at)
        return _with_receipt(state, event.client, event.idempotency_key, receipt)
    if isinstance(event, OtpVerificationFailed):
        state = evolve(state, consecutive_failures=event.consecutive_failures)
        challenge = state.challenges.get(event.challenge_id)
        if challenge is None:
            return state
        return _with_challenge(state, evolve(challenge, failures=event.attempt))
    if isinstance(event, OtpChallengeVerified):
        state = evolve(state, consecutive_failures=0)
        return _set_status(state, event.challenge_id, "verified")
    if isinstance(event, OtpChallengeSuperseded):
        return _set_status(state, event.challenge_id, "superseded")
    if isinstance(event, OtpChallengeLockedOut):
        if event.scope == "challenge":
            return _set_status(state, event.challenge_id, "locked")
        # An account lockout without an end would be for good.
        until = event.until or datetime.max.replace(tzinfo=UTC)
        return evolve(state, account_lockouts=state.account_lockouts + 1, locked_until=until)
    if isinstance(event, (OtpRequestRefused, RequestsCounted)):
        return state
    raise UnknownEventType(f"{type(event).__name__} is not an event of an OTP stream")


def _forget_before(state: OtpState, horizon: datetime) -> OtpState:
    """Forget closed challenges issued before ``horizon`` and receipts created before it (see ``KEPT_FOR``).

    Done when a challenge is issued, so that a fold and a snapshot forget
    alike. The account-lock counters are never forgotten.
    """
    receipts = kept_receipts(state.receipts, horizon)
    named = {receipt.request_id for receipt in receipts.values()}
    challenges = {challenge_id: c for challenge_id, c in state.challenges.items()
                  if c.status == "open" or c.issued_at >= horizon or challenge_id in named}
    if len(challenges) == len(state.challenges) and len(receipts) == len(state.receipts):
        return state
    return evolve(state, challenges=challenges, receipts=receipts)


def _with_receipt(state: OtpState, client: str | None, key: str, receipt: Receipt) -> OtpState:
    return evolve(state, receipts={**state.receipts, (client, key): receipt})


def _set_status(state: OtpState, challenge_id: UUID | None, status: str) -> OtpState:
    challenge = state.challenges.get(challenge_id) if challenge_id is not None else None
    if challenge is None or challenge.status != "open":
        return state
    return _with_challenge(state, evolve(challenge, status=status))


def _receipt(state: OtpState, client: str | None, key: str | None) -> PastRequest | None:
    receipt = state.receipts.get((client, key)) if key is not None else None
    challenge = state.challenges.get(receipt.request_id) if receipt is not None else None
    if receipt is None or challenge is None:
        return None
    return evolve(challenge.past(), created_at=receipt.created_at)


def fold_otp(events: Iterable[object], state: OtpState | None = None) -> OtpState:
    """The state after all ``events``, oldest first, from ``state`` (a snapshot) or the start."""
    state = state if state is not None else initial_otp_state()
    for event in events:
        state = evolve_otp(state, event)
    return state


def account_locked_until(state: OtpState, *, now: datetime) -> datetime | None:
    """When the account's OTP lockout ends, or None when it is not locked."""
    if state.locked_until is not None and now < state.locked_until:
        return state.locked_until
    return None




def _locked_message(until: datetime) -> str:
    return f"Too many wrong codes: one-time codes for this account are locked until {until.isoformat()}."


def _raise_if_account_locked(state: OtpState, now: datetime) -> None:
    until = account_locked_until(state, now=now)
    if until is not None:
        raise LockedOut(_locked_message(until), retry_at=until)


def decide_otp_request(
    state: OtpState,
    cmd: RequestOtp,
    *,
    now: datetime,
    challenge_id: UUID,
    message_id: UUID,
    nonce: str,
    keys: TokenKeys,
    policy: OtpPolicy,
    address_hmac: str | None = None,
) -> Decision:
    """Decide an OTP request: replay, refuse while locked, reuse, rate-limit,
    or issue a new challenge that supersedes every open one. ``nonce`` is the
    new challenge's secret (random, from the caller), from which with the key
    and the challenge id its code is derived.

    An idempotent replay is answered even while the account is locked: it
    writes and sends nothing, and the first answer is what a replay promises.
    A key answered by reusing the open challenge is bound to that challenge.
    """
    require_utc(now)
    params = (cmd.recipient, cmd.purpose)
    first = _receipt(state, cmd.client, cmd.idempotency_key)
    replay = replay_receipt(first, params, now=now, receipt_ttl=policy.receipt_ttl)
    if replay is not None:
        return replay
    _raise_if_account_locked(state, now)
    early = reuse_or_refuse(
        [c.past() for c in state.challenges.values()],
        params,
        now=now,
        cooldown=policy.cooldown,
        hourly_limit=policy.hourly_limit,
        refusal=lambda retry_at: OtpRequestRefused(cmd.scoped_user_id, "rate_limited", now, retry_at),
    )
    if early is not None:
        early = bind_key_to_reuse(
            early, flow="otp", user_id=cmd.scoped_user_id, client=cmd.client,
            idempotency_key=cmd.idempotency_key, now=now,
        )  # fmt: skip
        return count_floods(early, state.run, flow="otp", user_id=cmd.scoped_user_id, client=cmd.client, now=now)

    issued = OtpChallengeIssued(
        challenge_id=challenge_id,
        user_id=cmd.scoped_user_id,
        recipient=cmd.recipient,
        key_id=keys.current_id,
        digits=policy.digits,
        purpose=cmd.purpose,
        issued_at=now,
        expires_at=now + policy.ttl,
        message_id=message_id,
        idempotency_key=cmd.idempotency_key,
        client=cmd.client,
        address_hmac=address_hmac,
        derivation=CURRENT_DERIVATION,
        nonce=nonce,
    )
    superseded = tuple(
        OtpChallengeSuperseded(c.challenge_id, superseded_by=challenge_id)
        for c in state.challenges.values()
        if c.status == "open"
    )
    email = EmailQueued(
        message_id, "otp", OTP_CODE, cmd.scoped_user_id, challenge_id, cmd.recipient, available_at=now
    )
    return Decision(
        events=(*superseded, issued),
        emails=(email,),
        outcome=RequestOutcome(challenge_id, message_id, issued.expires_at, reused=False),
    )


def otp_code_for(challenge: OtpChallenge, keys: TokenKeys) -> str:
    """Re-derive a challenge's code (for the worker rendering the email), of the length it was issued with.

    ``SecretUnavailable`` when its nonce was erased: no one can derive it any more.
    """
    nonce = derivation_nonce(challenge.derivation, challenge.nonce)
    return derive_otp_code(keys.key(challenge.key_id), challenge.challenge_id, challenge.digits, nonce)


# The answer to a code for a known challenge that can no longer be used, by
# reason. An erased user's challenge is answered as an unknown one.
CODE_REFUSALS = {
    "erased": "The code is not valid.",
    "used": "The code was already used.",
    "superseded": "A newer code was sent; use that one.",
    "locked": "Too many wrong codes; request a new one.",
    "expired": "The code has expired; request a new one.",
}


def code_rejection(challenge: OtpChallenge, *, now: datetime) -> str | None:
    """Why no code is accepted for this challenge any more (a key of ``CODE_REFUSALS``), or None."""
    if not nonce_readable(challenge.derivation, challenge.nonce):
        return "erased"
    if challenge.status == "verified":
        return "used"
    if challenge.status in ("superseded", "locked"):
        return challenge.status
    if now >= challenge.expires_at:
        return "expired"
    return None


def _usable_challenge(
    state: OtpState, challenge_id: UUID, now: datetime, client: str | None
) -> OtpChallenge | Decision:
    """The challenge if a code may be checked against it, else the decision recording the refusal."""
    challenge = state.challenges.get(challenge_id)
    if challenge is None:
        # Unknown (or long forgotten): nothing to tie a record to, and writing one would let anyone fill the log.
        raise CodeRejected("The code is not valid.", attempts_left=0)
    reason = code_rejection(challenge, now=now)
    if reason is None:
        return challenge
    rejected = Decision(events=(OtpCodeRejected(challenge_id, reason, now),), emails=(),
                        outcome=Rejected(reason, CODE_REFUSALS[reason]))
    return count_rejections(rejected, state.rejections, flow="otp", user_id=challenge.user_id, client=client, now=now)


def _refused_while_locked(
    state: OtpState, challenge_id: UUID, until: datetime, now: datetime, client: str | None
) -> Decision:
    """A code presented while the whole account is locked: unchecked, and recorded when its challenge is known.

    An unknown challenge raises ``LockedOut`` and writes nothing (nothing to tie a record to).
    """
    message = _locked_message(until)
    challenge = state.challenges.get(challenge_id)
    if challenge is None:
        raise LockedOut(message, retry_at=until)
    rejected = Decision(events=(OtpCodeRejected(challenge_id, "account_locked", now),), emails=(),
                        outcome=Rejected("account_locked", message, retry_at=until))
    return count_rejections(rejected, state.rejections, flow="otp", user_id=challenge.user_id, client=client, now=now)


def check_code_shape(code: object, digits: int) -> None:
    """Raise ``InvalidInput`` unless ``code`` is ``digits`` ASCII digits."""
    well_formed = isinstance(code, str) and code.isascii() and code.isdigit()
    if not well_formed or len(code) != digits:
        raise InvalidInput(f"the code must be {digits} digits")


def decide_otp_verify(
    state: OtpState,
    challenge_id: UUID,
    code: str,
    *,
    now: datetime,
    keys: TokenKeys,
    policy: OtpPolicy,
    client: str | None = None,
) -> Decision:
    """Check ``code`` against a challenge.

    Raises, writing nothing: ``InvalidInput`` for a code of the wrong shape,
    ``LockedOut`` for an unknown challenge while the account is locked,
    ``CodeRejected`` for a challenge that is unknown. For a known challenge
    that is expired, superseded, verified, locked or erased, or presented
    while the account is locked, returns the recorded ``OtpCodeRejected`` (or
    its count, ``client`` counted) and ``Rejected``, the code unchecked.
    Otherwise returns the events of a success or of a counted failure (with
    any lockouts it triggers) and a ``VerifyOutcome``.
    """
    require_utc(now)
    known = state.challenges.get(challenge_id)
    # A challenge is held to the length it was issued with; an unknown one to
    # today's, so that a malformed code is answered alike whether the id
    # exists or not.
    check_code_shape(code, known.digits if known is not None else policy.digits)
    # The lock comes before the code is compared, so that a locked account
    # answers the same for right and wrong codes.
    until = account_locked_until(state, now=now)
    if until is not None:
        return _refused_while_locked(state, challenge_id, until, now, client)
    challenge = _usable_challenge(state, challenge_id, now, client)
    if isinstance(challenge, Decision):
        return challenge

    nonce = derivation_nonce(challenge.derivation, challenge.nonce)
    if otp_code_matches(keys.key(challenge.key_id), challenge_id, challenge.digits, code, nonce):
        attempts_left = policy.max_attempts - challenge.failures
        return Decision(
            events=(OtpChallengeVerified(challenge_id, now),),
            emails=(),
            outcome=VerifyOutcome(verified=True, attempts_left=attempts_left, locked=False),
        )

    attempt = challenge.failures + 1
    consecutive = state.consecutive_failures + 1
    events: list[object] = [OtpVerificationFailed(challenge_id, attempt, consecutive, now)]
    challenge_locked = attempt >= policy.max_attempts
    if challenge_locked:
        events.append(OtpChallengeLockedOut(challenge_id, "challenge", now, until=None))
    account_locked = consecutive % policy.account_lock_threshold == 0
    if account_locked:
        backoff = policy.account_lock_backoff(state.account_lockouts + 1)
        events.append(OtpChallengeLockedOut(challenge_id, "account", now, until=now + backoff))
    locked = challenge_locked or account_locked
    return Decision(
        events=tuple(events),
        emails=(),
        outcome=VerifyOutcome(
            verified=False,
            attempts_left=0 if locked else policy.max_attempts - attempt,
            locked=locked,
        ),
    )


def otp_delivery_verdict(state: OtpState, challenge_id: UUID, *, now: datetime) -> str | None:
    """None when the worker should send this code now, else why to skip it:
    "unknown_request", "superseded", "verified", "locked" or "expired"."""
    require_utc(now)
    challenge = state.challenges.get(challenge_id)
    if challenge is None:
        return "unknown_request"
    if challenge.status != "open":
        return challenge.status
    # A code that cannot be entered until the lock ends is not worth sending.
    if account_locked_until(state, now=now) is not None:
        return "locked"
    if now >= challenge.expires_at:
        return "expired"
    return None
