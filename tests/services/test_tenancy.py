"""Tenants own their users: two applications' ``u1`` share nothing, and neither can see or touch the other's.

Tenant B is answered about tenant A's links, codes and timelines exactly as
about something that does not exist, and nothing is written. Tested at the
service level, through real PostgreSQL: the HTTP handlers pass the caller's
tenant to these same functions.
"""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import parse_qs, urlsplit
from uuid import UUID, uuid4

import attrs
import pytest
from sqlalchemy import Engine, text

from domain.decisions import RequestOutcome
from domain.errors import CodeRejected, InvalidInput, NotFound, TokenInvalid
from domain.otp import RequestOtp
from domain.otp_events import OtpChallengeIssued, otp_stream
from domain.policy import OtpPolicy
from domain.reset import RequestReset
from domain.reset_events import ResetRequested, ResetSuperseded, reset_stream
from infra.clock import ManualClock
from infra.delivery.worker import Worker
from infra.errors import RateLimited
from infra.review.history import explain, history
from infra.review.timeline import message_timeline, request_timeline, user_timeline
from infra.services.otp import request_otp, verify_code
from infra.services.reset import consume_token, request_reset, verify_token
from infra.services.unit_of_work import ServiceContext
from tests.support.log_reading import stream_events
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log

SENDER = "authledger <no-reply@app.test>"
ADA = "ada@acme.test"
BOB = "bob@shop.test"
ALL_EVENTS = text("SELECT global_position, stream_id, event_type FROM events ORDER BY global_position")


def the_log(engine: Engine) -> list[tuple[object, ...]]:
    with engine.connect() as connection:
        return [tuple(row) for row in connection.execute(ALL_EVENTS)]


def delivered(ctx: ServiceContext, recipient: str) -> list[str]:
    """The text bodies of what the worker sends now to ``recipient``."""
    mailer = RecordingMailer()
    Worker(ctx, mailer, sender=SENDER).drain()
    return [email.text_body for email in mailer.sent_to(recipient)]


def token_in(body: str) -> str:
    link = next(line for line in body.splitlines() if line.startswith("https://app.test/"))
    return parse_qs(urlsplit(link).query)["token"][0]


def code_in(body: str) -> str:
    return next(line.strip() for line in body.splitlines() if line.strip().isdigit())


def answer_to(call: object) -> tuple[type, str, int | None]:
    """What a refused call tells: the error's kind, its words and the attempts it says are left."""
    with pytest.raises((TokenInvalid, CodeRejected, NotFound, InvalidInput)) as refused:
        call()  # type: ignore[operator]
    return type(refused.value), refused.value.message, getattr(refused.value, "attempts_left", None)


class TestTwoTenantsWithTheSameUserId:
    def test_their_requests_live_on_two_streams_and_the_default_tenant_keeps_bare_names(
        self, ctx: ServiceContext, engine: Engine
    ) -> None:
        acme = request_reset(ctx, RequestReset("u1", ADA, tenant="acme"))
        shop = request_reset(ctx, RequestReset("u1", BOB, tenant="shop"))
        plain = request_reset(ctx, RequestReset("u1", "old@example.test"))

        assert [e.request_id for e in stream_events(engine, reset_stream("acme u1"))] == [acme.request_id]
        assert [e.request_id for e in stream_events(engine, reset_stream("shop u1"))] == [shop.request_id]
        assert [e.request_id for e in stream_events(engine, reset_stream("u1"))] == [plain.request_id]
        assert not plain.reused and not shop.reused, "no tenant's open request was reused for another"
        assert_projections_match_log(engine)

    def test_a_request_of_one_tenant_does_not_supersede_the_others_open_link(
        self, ctx: ServiceContext, engine: Engine, clock: ManualClock
    ) -> None:
        acme = request_reset(ctx, RequestReset("u1", ADA, tenant="acme"))
        [acme_link] = delivered(ctx, ADA)
        clock.advance(timedelta(minutes=2))  # past the cooldown: a request of the same user would supersede

        request_reset(ctx, RequestReset("u1", BOB, tenant="shop"))

        assert not any(isinstance(e, ResetSuperseded) for e in stream_events(engine, reset_stream("acme u1")))
        assert verify_token(ctx, token_in(acme_link), tenant="acme").request_id == acme.request_id
        assert_projections_match_log(engine)

    def test_they_share_no_rate_limit(self, ctx: ServiceContext, engine: Engine, clock: ManualClock) -> None:
        for _ in range(ctx.reset_policy.hourly_limit):
            request_reset(ctx, RequestReset("u1", ADA, tenant="acme"))
            clock.advance(ctx.reset_policy.cooldown + timedelta(seconds=1))
        with pytest.raises(RateLimited):
            request_reset(ctx, RequestReset("u1", ADA, tenant="acme"))

        outcome = request_reset(ctx, RequestReset("u1", BOB, tenant="shop"))

        assert isinstance(outcome, RequestOutcome) and not outcome.reused
        assert_projections_match_log(engine)

    def test_otp_challenges_are_issued_per_tenant_and_the_events_carry_the_scoped_user(
        self, ctx: ServiceContext, engine: Engine
    ) -> None:
        acme = request_otp(ctx, RequestOtp("u1", ADA, tenant="acme"))
        shop = request_otp(ctx, RequestOtp("u1", BOB, tenant="shop"))

        [issued] = stream_events(engine, otp_stream("acme u1"))
        assert isinstance(issued, OtpChallengeIssued) and issued.user_id == "acme u1"
        assert issued.challenge_id == acme.request_id != shop.request_id
        assert_projections_match_log(engine)

    def test_a_tenant_name_out_of_shape_is_refused_before_anything_is_decided(self) -> None:
        for name in ("", "Acme", "a b", "-acme", "x" * 64):
            with pytest.raises(InvalidInput, match="a tenant name is"):
                RequestReset("u1", ADA, tenant=name)
            with pytest.raises(InvalidInput, match="a tenant name is"):
                RequestOtp("u1", ADA, tenant=name)


class TestAnotherTenantsResetLink:
    def test_is_invalid_for_verify_and_consume_in_the_words_of_an_unknown_link_and_writes_nothing(
        self, ctx: ServiceContext, engine: Engine
    ) -> None:
        acme = request_reset(ctx, RequestReset("u1", ADA, tenant="acme"))
        token = token_in(delivered(ctx, ADA)[0])
        unknown = "A" * 43  # the shape of a token, but no link's
        log = the_log(engine)

        for tenant in ("shop", "default"):
            assert answer_to(lambda: verify_token(ctx, token, tenant=tenant)) == answer_to(
                lambda: verify_token(ctx, unknown, tenant=tenant))
            assert answer_to(lambda: consume_token(ctx, token, tenant=tenant)) == answer_to(
                lambda: consume_token(ctx, unknown, tenant=tenant))

        assert the_log(engine) == log, "nothing was written"
        assert consume_token(ctx, token, tenant="acme").request_id == acme.request_id, "the link still works"
        assert_projections_match_log(engine)


class TestOtpVerifyNamesTheUserAndPurpose:
    @pytest.fixture
    def issued(self, ctx: ServiceContext) -> tuple[UUID, str]:
        """A step-up challenge of acme's user u1, and the code its email carries."""
        challenge = request_otp(ctx, RequestOtp("u1", ADA, purpose="step_up", tenant="acme"))
        return challenge.request_id, code_in(delivered(ctx, ADA)[0])

    @pytest.mark.parametrize(
        ("user_id", "purpose", "tenant"),
        [("u1", None, "shop"), ("u1", "step_up", "default"), ("u2", None, "acme"), ("u1", "login", "acme")],
        ids=["other-tenant", "default-tenant", "other-user", "other-purpose"],
    )
    def test_a_mismatch_is_answered_as_an_unknown_challenge_and_consumes_no_attempt(
        self, ctx: ServiceContext, engine: Engine, issued: tuple[UUID, str], user_id: str, purpose: str | None,
        tenant: str,
    ) -> None:
        challenge_id, code = issued
        log = the_log(engine)

        for presented in (code, "000000"):
            mismatch = answer_to(lambda: verify_code(ctx, challenge_id, presented, user_id=user_id,
                                                     purpose=purpose, tenant=tenant))
            unknown = answer_to(lambda: verify_code(ctx, uuid4(), presented, user_id=user_id,
                                                    purpose=purpose, tenant=tenant))
            assert mismatch == unknown == (CodeRejected, "The code is not valid.", 0)

        assert the_log(engine) == log, "no attempt was recorded"
        outcome = verify_code(ctx, challenge_id, code, user_id="u1", purpose="step_up", tenant="acme")
        assert outcome.verified and outcome.attempts_left == ctx.otp_policy.max_attempts
        assert_projections_match_log(engine)

    def test_the_purpose_may_be_left_out(self, ctx: ServiceContext, issued: tuple[UUID, str]) -> None:
        challenge_id, code = issued
        assert verify_code(ctx, challenge_id, code, user_id="u1", tenant="acme").verified

    def test_a_mismatch_is_held_to_todays_code_length_as_an_unknown_challenge_is(
        self, ctx: ServiceContext, engine: Engine
    ) -> None:
        eight = attrs.evolve(ctx, otp_policy=OtpPolicy(digits=8))
        challenge = request_otp(eight, RequestOtp("u1", ADA, tenant="acme"))
        log = the_log(engine)

        # The challenge's own length (8) would say "must be 8 digits" and so betray it.
        mismatch = answer_to(lambda: verify_code(ctx, challenge.request_id, "123456", user_id="u1", tenant="shop"))
        unknown = answer_to(lambda: verify_code(ctx, uuid4(), "123456", user_id="u1", tenant="shop"))

        assert mismatch == unknown == (CodeRejected, "The code is not valid.", 0)
        assert the_log(engine) == log

    def test_a_mismatch_while_the_owners_account_is_locked_still_reads_as_unknown(
        self, ctx: ServiceContext, engine: Engine
    ) -> None:
        strict = attrs.evolve(ctx, otp_policy=OtpPolicy(max_attempts=3, account_lock_threshold=3))
        challenge = request_otp(strict, RequestOtp("u1", ADA, tenant="acme"))
        code = code_in(delivered(strict, ADA)[0])
        wrong = str((int(code) + 1) % 10 ** len(code)).zfill(len(code))
        for _ in range(3):
            with pytest.raises(CodeRejected):
                verify_code(strict, challenge.request_id, wrong, user_id="u1", tenant="acme")
        log = the_log(engine)

        answer = answer_to(lambda: verify_code(strict, challenge.request_id, code, user_id="u1", tenant="shop"))

        assert answer == (CodeRejected, "The code is not valid.", 0)
        assert the_log(engine) == log

    @pytest.mark.parametrize(("user_id", "purpose"), [("", None), ("a b", None), ("u1", "two words"), ("u1", "")])
    def test_a_malformed_user_id_or_purpose_is_bad_input_and_writes_nothing(
        self, ctx: ServiceContext, engine: Engine, issued: tuple[UUID, str], user_id: str, purpose: str | None
    ) -> None:
        challenge_id, code = issued
        log = the_log(engine)
        with pytest.raises(InvalidInput):
            verify_code(ctx, challenge_id, code, user_id=user_id, purpose=purpose, tenant="acme")
        assert the_log(engine) == log


class TestAnotherTenantsTimeline:
    def test_by_request_and_by_message_is_not_found_in_the_words_of_an_unknown_id(
        self, ctx: ServiceContext, engine: Engine
    ) -> None:
        acme = request_reset(ctx, RequestReset("u1", ADA, tenant="acme"))
        challenge = request_otp(ctx, RequestOtp("u1", ADA, tenant="acme"))
        log = the_log(engine)
        unknown = uuid4()

        def words(call: object, known: UUID) -> tuple[type, str, None]:
            kind, said, left = answer_to(call)
            return kind, said.replace(str(known), "<id>"), left

        for request_id in (acme.request_id, challenge.request_id):
            assert words(lambda: request_timeline(ctx, request_id, tenant="shop"), request_id) == words(
                lambda: request_timeline(ctx, unknown, tenant="shop"), unknown)
        assert words(lambda: message_timeline(ctx, acme.message_id, tenant="shop"), acme.message_id) == words(
            lambda: message_timeline(ctx, unknown, tenant="shop"), unknown)
        for tenant in ("shop", "default"):
            with pytest.raises(NotFound):
                explain(engine, request_id=acme.request_id, tenant=tenant, now=ctx.clock.now())
            with pytest.raises(NotFound):
                explain(engine, message_id=acme.message_id, tenant=tenant, now=ctx.clock.now())
        assert the_log(engine) == log

    def test_by_user_shows_only_that_tenants_user_by_their_own_id(self, ctx: ServiceContext, engine: Engine) -> None:
        acme = request_reset(ctx, RequestReset("u1", ADA, tenant="acme"))
        shop = request_reset(ctx, RequestReset("u1", BOB, tenant="shop"))

        seen = user_timeline(ctx, "u1", tenant="shop").as_json()
        mine = request_timeline(ctx, acme.request_id, tenant="acme").as_json()

        named = {str(e["payload"].get("request_id")) for e in seen["events"] if e["type"] == "ResetRequested"}
        assert named == {str(shop.request_id)}
        assert seen["user_id"] == mine["user_id"] == "u1"
        assert user_timeline(ctx, "u1", tenant="other").as_json()["events"] == []
        assert user_timeline(ctx, "u1").as_json()["events"] == [], "the default tenant's u1 is nobody yet"

    def test_history_and_explain_tell_one_tenants_user_by_their_own_id(
        self, ctx: ServiceContext, engine: Engine
    ) -> None:
        acme = request_reset(ctx, RequestReset("u1", ADA, tenant="acme"))
        request_reset(ctx, RequestReset("u1", BOB, tenant="shop"))

        told = history(engine, "u1", tenant="acme", now=ctx.clock.now())
        explained = explain(engine, request_id=acme.request_id, tenant="acme", now=ctx.clock.now())

        assert told.subject == "user u1 of tenant acme"
        requested = [e for e in told.timeline if e.event_type == ResetRequested.__name__]
        assert len(requested) == 1, "shop's u1 is someone else"
        assert f"Reset request {acme.request_id} for user u1 was made" in explained.render()
        with pytest.raises(NotFound, match="no events about user 'u1' of tenant other"):
            history(engine, "u1", tenant="other", now=ctx.clock.now())
        with pytest.raises(InvalidInput):
            history(engine, "acme u1", now=ctx.clock.now())  # a scoped id is no user id
