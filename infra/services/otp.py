"""Email one-time codes: request a challenge, verify a code.

A code is checked on the user's stream; the ``otp_challenges`` projection
only says which user a challenge id belongs to (and for what purpose), so
that a code presented for another tenant, user or purpose is turned away as
an unknown challenge before the stream is touched. A wrong code is recorded
(committed) before ``CodeRejected`` is raised, so that the count of wrong
codes cannot be reset by a caller that stops listening. So is a code
presented for a known challenge that can no longer be used
(``OtpCodeRejected``, counted past a bound per window); an unknown challenge
writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from sqlalchemy import Connection, bindparam, select

from domain.decisions import Decision, Refused, Rejected, RequestOutcome, VerifyOutcome
from domain.input_checks import check_text
from domain.errors import CodeRejected, InvalidInput, LockedOut
from domain.limits import Quota
from domain.request_rules import RATE_WINDOW
from infra.errors import RateLimited
from domain.otp import RequestOtp, check_code_shape, decide_otp_request, decide_otp_verify
from domain.otp_events import OtpChallengeLockedOut, otp_stream
from domain.otp_state import fold_otp
from domain.tenants import DEFAULT_TENANT, check_purpose_name, scoped_user
from infra.db import tables
from infra.services.address_index import address_hmac
from infra.logs import log_event
from infra.services.locks import IdempotencyLock, InFlight
from infra.services.tenants import TenantRules
from infra.services.send_limits import send_admission, verify_admission
from infra.services.suppressions import suppression_admission
from infra.projector.snapshots import Lookups, receipt_lookup
from infra.services.unit_of_work import ServiceContext, StreamOf, decide_on_stream

log = logging.getLogger("authledger.otp")


def request_otp(
    ctx: ServiceContext, cmd: RequestOtp, metadata: Mapping[str, Any] | None = None, *,
    in_flight: InFlight = "wait", client_ip: str | None = None,
) -> RequestOutcome:
    """Issue (or reuse) a challenge and queue its code email.

    ``PurposeUnknown`` (nothing written) for a purpose the tenant does not
    allow, ``RateLimited`` past the hourly limit, or past a limit of the address or
    of the end user's ``client_ip`` (``domain.send_limits``: nothing is
    written), ``LockedOut`` while the account's
    OTP flow is locked, ``IdempotencyMismatch`` for a key used with another
    recipient or purpose. While a request with the same key runs,
    ``in_flight`` says whether to "wait" for it or "refuse" with
    ``RequestInFlight``.
    """
    address_hash = address_hmac(ctx.keys, cmd.recipient)  # for the address index and the address's limit
    # The tenant's purposes, and the deployment's rules with its overrides, read with the stream: no wait of
    # their own.
    rules = TenantRules(ctx, cmd.tenant, cmd.purpose)
    admit = send_admission(ctx.keys, lambda: (rules.policies().send_limits, rules.policies().otp.hourly_limit),
                           flow="otp", tenant=cmd.tenant, scoped_user_id=cmd.scoped_user_id,
                           address_hash=address_hash, client_ip=client_ip)
    challenge_id, message_id, nonce = ctx.new_id(), ctx.new_id(), ctx.new_nonce()
    lock = IdempotencyLock.for_request("otp", cmd.client, cmd.scoped_user_id, cmd.idempotency_key, in_flight)
    decision = decide_on_stream(
        ctx, rules.asked_with(otp_stream(cmd.scoped_user_id)), fold_otp,
        rules.before(lambda state, now, policies: decide_otp_request(
            state, cmd, now=now, challenge_id=challenge_id, message_id=message_id, nonce=nonce,
            keys=ctx.keys, policy=policies.otp, address_hmac=address_hash,
        )),
        metadata,
        idempotency_lock=lock,
        lookups=receipt_lookup(cmd.client, cmd.idempotency_key),
        admit=suppression_admission(ctx.keys, tenant=cmd.tenant, recipient=cmd.recipient, then=admit),
    )  # fmt: skip
    if isinstance(decision.outcome, Refused):
        log_event(log, "otp request refused", user_id=cmd.scoped_user_id, reason=decision.outcome.reason,
                  retry_at=decision.outcome.retry_at)
        raise RateLimited(
            f"too many one-time codes for this user; retry after {decision.outcome.retry_at.isoformat()}",
            retry_at=decision.outcome.retry_at, quota=Quota("per-user", rules.policies().otp.hourly_limit,
                                                             RATE_WINDOW),
        )
    outcome = decision.outcome
    assert isinstance(outcome, RequestOutcome)  # decide_otp_request answers with one or refuses
    log_event(log, "otp challenge requested", user_id=cmd.scoped_user_id, challenge_id=outcome.request_id,
              message_id=outcome.message_id, reused=outcome.reused, replayed=outcome.replayed)
    return outcome


def parse_challenge_id(value: object) -> UUID:
    """A challenge id from user input; ``InvalidInput`` unless it is a UUID."""
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError:
        raise InvalidInput("the challenge id must be a UUID like 123e4567-e89b-12d3-a456-426614174000") from None


# Built once: every verify looks its challenge's owner up.
CHALLENGE_OWNER = select(tables.otp_challenges.c.user_id, tables.otp_challenges.c.purpose).where(
    tables.otp_challenges.c.challenge_id == bindparam("challenge_id"))


def _stream_of_challenge(ctx: ServiceContext, challenge_id: UUID, code: str, user_id: str,
                         purpose: str | None) -> StreamOf:
    """The challenge's user's OTP stream, if it is ``user_id``'s and (when named) for ``purpose``: a look-up
    in the decision's transaction.

    Anything else, an unknown id or a challenge of another tenant, user or
    purpose, is answered as the domain answers an unknown challenge: a
    malformed code is held to today's length, any other gets the words of a
    wrong code, and no attempt is counted. Other words would leak which ids
    exist, and a counted attempt would let a caller lock someone else's code.
    """
    def stream_of(connection: Connection) -> str:
        found = connection.execute(CHALLENGE_OWNER, {"challenge_id": challenge_id}).first()
        if found is None or found.user_id != user_id or purpose not in (None, found.purpose):
            check_code_shape(code, ctx.otp_policy.digits)
            raise CodeRejected("The code is not valid.", attempts_left=0)
        return otp_stream(user_id)

    return stream_of


def _rejection(decision: Decision, outcome: VerifyOutcome) -> str:
    account_lock = next(
        (e for e in decision.events if isinstance(e, OtpChallengeLockedOut) and e.scope == "account"), None
    )
    if account_lock is not None and account_lock.until is not None:
        return ("The code is wrong. Too many wrong codes in a row: one-time codes for this account are "
                f"locked until {account_lock.until.isoformat()}.")
    if outcome.locked:
        return "The code is wrong and no attempts are left: this code is locked; request a new one."
    plural = "attempt" if outcome.attempts_left == 1 else "attempts"
    return f"The code is wrong; {outcome.attempts_left} {plural} left."


def verify_code(
    ctx: ServiceContext, challenge_id: UUID | str, code: str, metadata: Mapping[str, Any] | None = None, *,
    user_id: str, purpose: str | None = None, tenant: str = DEFAULT_TENANT, client_ip: str | None = None,
) -> VerifyOutcome:
    """Accept the right code once, for the user (and purpose, when given) it was issued to.

    ``InvalidInput`` (nothing written) for a malformed challenge id, code,
    user id or purpose; ``LockedOut`` while the account's OTP flow is locked;
    ``CodeRejected`` with ``attempts_left`` for a wrong code (recorded first)
    and for a challenge that is unknown, expired, superseded, used or locked,
    or that belongs to another tenant, user or purpose (answered as unknown).
    With ``client_ip``, ``RateLimited`` (nothing written) past that IP's
    checks this hour, whatever the code: a refusal says nothing of it.
    """
    challenge_id = parse_challenge_id(challenge_id)
    check_text("user_id", user_id, max_length=200)
    if purpose is not None:
        check_purpose_name(purpose)  # the one rule for a purpose, as when the code was requested
    admit = verify_admission(ctx.keys, ctx.send_limits, tenant=tenant, client_ip=client_ip)
    # The code's shape is checked against the challenge's own length, which
    # only its stream knows (decide_otp_verify).
    user_id = scoped_user(tenant, user_id)
    client = (metadata or {}).get("client")
    decision = decide_on_stream(
        ctx, _stream_of_challenge(ctx, challenge_id, code, user_id, purpose), fold_otp,
        lambda state, now: decide_otp_verify(state, challenge_id, code, now=now, keys=ctx.keys, policy=ctx.otp_policy,
                                             client=client if isinstance(client, str) else None),
        metadata,
        lookups=Lookups(request_ids=(challenge_id,)),
        admit=admit,
    )
    outcome = decision.outcome
    if isinstance(outcome, Rejected):
        log_event(log, "otp code refused", user_id=user_id, challenge_id=challenge_id, reason=outcome.reason,
                  counted=decision.counted is not None)
        if outcome.retry_at is not None:  # the account is locked: recorded, and answered as before with 429
            raise LockedOut(outcome.message, retry_at=outcome.retry_at)
        raise CodeRejected(outcome.message, attempts_left=0, reason=outcome.reason)
    assert isinstance(outcome, VerifyOutcome)
    log_event(log, "otp code verified" if outcome.verified else "otp code rejected", user_id=user_id,
              challenge_id=challenge_id, attempts_left=outcome.attempts_left, locked=outcome.locked)
    if not outcome.verified:
        raise CodeRejected(_rejection(decision, outcome), attempts_left=outcome.attempts_left, reason="wrong")
    return outcome
