"""Email one-time-code challenges of one user: the ``otp-user:<user_id>`` stream.

Same shape as ``domain.reset``: fold the stream into ``OtpState``, decide, and
return a ``Decision``. On top of the request rules, wrong codes lock a
challenge after ``max_attempts`` and lock the whole flow, with a doubling
backoff, every ``account_lock_threshold`` consecutive failures. Only a
correct code resets that count; a new challenge does not, or an attacker
would request a fresh challenge every few guesses.

The events are in ``domain.otp_events``, the fold in ``domain.otp_state``.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from attrs import field, frozen

from domain.counting import count_floods, count_rejections
from domain.decisions import (
    Decision,
    Rejected,
    RequestOutcome,
    VerifyOutcome,
)
from domain.input_checks import (
    check_request_input,
    require_utc,
)
from domain.locales import optional_locale
from domain.request_rules import (
    bind_key_to_reuse,
    replay_receipt,
    reuse_or_refuse,
)
from domain.email import EmailQueued
from domain.errors import CodeRejected, InvalidInput, LockedOut
from domain.policy import OtpPolicy
from domain.tenants import DEFAULT_TENANT, check_purpose_name, check_tenant_name, scoped_user
from domain.tokens import (
    CURRENT_DERIVATION,
    TokenKeys,
    derivation_nonce,
    derive_otp_code,
    nonce_readable,
    otp_code_matches,
)
from domain.otp_events import (
    OTP_CODE,
    OtpChallengeIssued,
    OtpChallengeLockedOut,
    OtpChallengeSuperseded,
    OtpChallengeVerified,
    OtpCodeRejected,
    OtpRequestRefused,
    OtpVerificationFailed,
)
from domain.otp_state import OtpChallenge, OtpState, account_locked_until, open_challenges, receipt_request


@frozen
class RequestOtp:
    """Ask for a one-time code for ``user_id`` of ``tenant``, sent to ``recipient``."""

    user_id: str  # the tenant's own id for the user; events carry ``scoped_user_id``
    recipient: str
    purpose: str = "login"
    idempotency_key: str | None = None
    client: str | None = None
    tenant: str = DEFAULT_TENANT
    # The end user's language (BCP 47), in its conventional case; the email is written in the best match.
    locale: str | None = field(default=None, converter=optional_locale)

    def __attrs_post_init__(self) -> None:
        check_request_input(self.user_id, self.recipient, self.idempotency_key, self.client)
        check_purpose_name(self.purpose)  # the API's pattern: whether the tenant allows it is the service's
        check_tenant_name(self.tenant)

    @property
    def scoped_user_id(self) -> str:
        """The user as streams and events name them: two tenants' ``u1`` are two users."""
        return scoped_user(self.tenant, self.user_id)


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
    first = receipt_request(state, cmd.client, cmd.idempotency_key)
    replay = replay_receipt(first, params, now=now, receipt_ttl=policy.receipt_ttl)
    if replay is not None:
        return replay
    _raise_if_account_locked(state, now)
    early = reuse_or_refuse(
        [c.past() for c in open_challenges(state)],
        state.request_times,
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
        return count_floods(early, state.run, state.flood, flow="otp", user_id=cmd.scoped_user_id,
                            client=cmd.client, now=now)

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
        locale=cmd.locale,
    )
    superseded = tuple(
        OtpChallengeSuperseded(c.challenge_id, superseded_by=challenge_id)
        for c in open_challenges(state)
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
    "invalidated": "The code was withdrawn by support.",
    "locked": "Too many wrong codes; request a new one.",
    "expired": "The code has expired; request a new one.",
}


def code_rejection(challenge: OtpChallenge, *, now: datetime) -> str | None:
    """Why no code is accepted for this challenge any more (a key of ``CODE_REFUSALS``), or None."""
    if not nonce_readable(challenge.derivation, challenge.nonce):
        return "erased"
    if challenge.status == "verified":
        return "used"
    if challenge.status in ("superseded", "invalidated", "locked"):
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
        # Unknown: nothing to tie a record to, and writing one would let anyone fill the log.
        raise CodeRejected("The code is not valid.", attempts_left=0)
    reason = code_rejection(challenge, now=now)
    if reason is None:
        return challenge
    rejected = Decision(events=(OtpCodeRejected(challenge_id, reason, now),), emails=(),
                        outcome=Rejected(reason, CODE_REFUSALS[reason]))
    return count_rejections(rejected, state.rejections, state.flood, flow="otp", user_id=challenge.user_id,
                            client=client, now=now)


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
    return count_rejections(rejected, state.rejections, state.flood, flow="otp", user_id=challenge.user_id,
                            client=client, now=now)


def check_code_shape(code: object, digits: int) -> None:
    """Raise ``InvalidInput`` unless ``code`` is ``digits`` ASCII digits."""
    if not (isinstance(code, str) and code.isascii() and code.isdigit() and len(code) == digits):
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
    that is expired, superseded, invalidated, verified, locked or erased, or presented
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
    "unknown_request", "superseded", "invalidated", "verified", "locked" or "expired"."""
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
