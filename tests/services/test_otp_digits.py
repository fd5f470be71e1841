"""A challenge keeps the code length it was issued with, on real PostgreSQL.

AUTHLEDGER_OTP_DIGITS may change while challenges are open (a restart with a
new setting): the codes already sent must still be delivered and accepted as
they were issued, and only new challenges take the new length.
"""

from __future__ import annotations

import json
from uuid import uuid4

import attrs
import pytest
from attrs import frozen
from sqlalchemy import Engine, text

from domain.errors import InvalidInput
from domain.otp import RequestOtp
from domain.otp_events import OtpChallengeIssued, otp_stream
from domain.policy import OtpPolicy
from domain.tokens import derive_otp_code
from infra.clock import ManualClock
from infra.services.otp import request_otp, verify_code
from infra.projector.registry import projection_named
from infra.projector.rebuild import rebuild
from infra.services.unit_of_work import ServiceContext
from infra.delivery.worker import Worker
from tests.support.log_reading import stream_events
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log

SENDER = "authledger <no-reply@app.test>"


@frozen
class PolicyBeforeTheFloor(OtpPolicy):
    """An OTP policy as authledger took it before the 6-digit floor: 4 and 5 digits allowed."""

    def __attrs_post_init__(self) -> None:
        pass
ADA = "ada@example.test"


def code_in(email_text: str) -> str:
    """The code stands on a line of its own."""
    return next(line for line in email_text.splitlines() if line.strip().isdigit()).strip()


def deliver(ctx: ServiceContext) -> list[str]:
    """The codes of the emails a worker sends now."""
    mailer = RecordingMailer()
    Worker(ctx, mailer, sender=SENDER).drain()
    return [code_in(email.text_body) for email in mailer.emails]


def test_a_six_digit_challenge_still_verifies_after_the_policy_changes_to_eight_digits(
    ctx: ServiceContext, engine: Engine
) -> None:
    six = attrs.evolve(ctx, otp_policy=OtpPolicy(digits=6))
    eight = attrs.evolve(ctx, otp_policy=OtpPolicy(digits=8))
    old = request_otp(six, RequestOtp("42", ADA))

    [old_code] = deliver(eight)  # the worker already runs with the new setting
    new = request_otp(eight, RequestOtp("43", ADA))
    [new_code] = deliver(eight)

    assert len(old_code) == 6 and len(new_code) == 8
    with pytest.raises(InvalidInput, match="the code must be 6 digits"):
        verify_code(eight, old.request_id, old_code + "00", user_id="42")
    assert verify_code(eight, old.request_id, old_code, user_id="42").verified
    with pytest.raises(InvalidInput, match="the code must be 8 digits"):
        verify_code(eight, new.request_id, new_code[:6], user_id="43")
    assert verify_code(eight, new.request_id, new_code, user_id="43").verified
    digits = [e.digits for user in ("42", "43") for e in stream_events(engine, otp_stream(user))
              if isinstance(e, OtpChallengeIssued)]  # fmt: skip
    assert digits == [6, 8]
    assert_projections_match_log(engine)


def test_a_challenge_stored_before_challenges_recorded_their_length_is_a_six_digit_one(
    ctx: ServiceContext, engine: Engine, admin_engine: Engine, clock: ManualClock
) -> None:
    challenge_id, message_id, now = uuid4(), uuid4(), clock.now()
    # Version 1 payloads, as an authledger before the upgrade wrote them (no "digits").
    issued = {
        "challenge_id": str(challenge_id), "user_id": "42", "recipient": ADA, "key_id": ctx.keys.current_id,
        "purpose": "login", "issued_at": now.isoformat(), "expires_at": (now + ctx.otp_policy.ttl).isoformat(),
        "message_id": str(message_id), "idempotency_key": None, "client": None,
    }  # fmt: skip
    queued = {
        "message_id": str(message_id), "flow": "otp", "template": "otp_code", "user_id": "42",
        "request_id": str(challenge_id), "recipient": ADA, "available_at": now.isoformat(),
    }  # fmt: skip
    with admin_engine.begin() as connection:
        for stream, event_type, payload in [
            (otp_stream("42"), "OtpChallengeIssued", issued), (f"email:{message_id}", "EmailQueued", queued),
        ]:  # fmt: skip
            connection.execute(text("""
                INSERT INTO events (stream_id, stream_version, event_id, event_type, schema_version, payload)
                VALUES (:stream, 1, gen_random_uuid(), :event_type, 1, CAST(:payload AS jsonb))
            """), {"stream": stream, "event_type": event_type, "payload": json.dumps(payload)})  # fmt: skip
    for name in ("otp_challenges", "email_outbox"):
        rebuild(admin_engine, projection_named(name))
    eight = attrs.evolve(ctx, otp_policy=OtpPolicy(digits=8))

    [code] = deliver(eight)

    assert code == derive_otp_code(ctx.keys.key(ctx.keys.current_id), challenge_id, 6)
    assert verify_code(eight, challenge_id, code, user_id="42").verified
    assert_projections_match_log(engine)


@pytest.mark.parametrize("digits", [4, 5])
def test_a_challenge_issued_with_fewer_digits_before_the_floor_still_delivers_and_verifies(
    ctx: ServiceContext, engine: Engine, digits: int
) -> None:
    before = attrs.evolve(ctx, otp_policy=PolicyBeforeTheFloor(digits=digits))
    old = request_otp(before, RequestOtp("42", ADA))

    [code] = deliver(ctx)  # today's worker and verifier, at the default 6 digits

    assert len(code) == digits
    with pytest.raises(InvalidInput, match=f"the code must be {digits} digits"):
        verify_code(ctx, old.request_id, code + "0" * (6 - digits), user_id="42")
    assert verify_code(ctx, old.request_id, code, user_id="42").verified
    assert_projections_match_log(engine)
