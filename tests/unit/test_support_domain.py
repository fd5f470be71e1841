"""Support withdraws a user's open links and codes: given events / when invalidated / then events."""

from __future__ import annotations

from datetime import timedelta

import pytest

from domain.decisions import Rejected
from domain.errors import InvalidInput
from domain.otp import CODE_REFUSALS, otp_delivery_verdict
from domain.otp_events import OtpChallengeInvalidated
from domain.otp_state import fold_otp
from domain.reset import LINK_REFUSALS, decide_consume, decide_verify_link, reset_delivery_verdict
from domain.reset_events import RESET_LINK, ResetInvalidated, ResetSuperseded
from domain.reset_state import fold_reset
from domain.support import check_flow, decide_otp_invalidation, decide_reset_invalidation, support_metadata
from domain.tokens import hash_token
from tests.unit import test_otp_domain as otp_given
from tests.unit.test_reset_domain import POLICY, T0, mid, requested, rid, token_of

REASON = "ticket 4711: the user says a stranger asked for the link"


def test_invalidation_closes_the_open_request_with_supports_reason() -> None:
    given = [requested(1, T0)]
    decision = decide_reset_invalidation(fold_reset(given), reason=REASON, now=T0 + timedelta(minutes=1))
    assert decision.events == (ResetInvalidated(rid(1), REASON, T0 + timedelta(minutes=1)),)
    assert decision.emails == ()


def test_a_user_with_nothing_open_gets_nothing_written() -> None:
    superseded = [requested(1, T0), ResetSuperseded(rid(1), None, "password_changed")]
    assert decide_reset_invalidation(fold_reset(superseded), reason=REASON, now=T0).events == ()
    assert decide_reset_invalidation(fold_reset([]), reason=REASON, now=T0).events == ()


def test_an_expired_request_is_left_as_it_is() -> None:
    late = T0 + POLICY.ttl + timedelta(seconds=1)
    assert decide_reset_invalidation(fold_reset([requested(1, T0)]), reason=REASON, now=late).events == ()


def test_a_withdrawn_link_is_refused_as_invalidated_and_the_refusal_recorded() -> None:
    state = fold_reset([requested(1, T0), ResetInvalidated(rid(1), REASON, T0 + timedelta(minutes=1))])
    decision = decide_verify_link(state, hash_token(token_of(1)), now=T0 + timedelta(minutes=2))
    assert decision.outcome == Rejected("invalidated", LINK_REFUSALS["invalidated"])
    assert LINK_REFUSALS["invalidated"] == "The reset link was withdrawn by support."
    consumed = decide_consume(state, hash_token(token_of(1)), now=T0 + timedelta(minutes=2),
                              notice_message_id=mid(9))
    assert isinstance(consumed.outcome, Rejected) and consumed.outcome.reason == "invalidated"


def test_the_queued_email_of_a_withdrawn_link_is_skipped_as_invalidated() -> None:
    state = fold_reset([requested(1, T0), ResetInvalidated(rid(1), REASON, T0)])
    assert reset_delivery_verdict(state, rid(1), now=T0, template=RESET_LINK) == "invalidated"


def test_a_withdrawn_challenge_refuses_its_right_code_and_its_email_is_skipped() -> None:
    given = [otp_given.issued(1, T0), OtpChallengeInvalidated(otp_given.cid(1), REASON, T0)]
    decision = otp_given.when_verified(given, 1, otp_given.right_code(1), at=T0 + timedelta(seconds=5))
    assert decision.outcome == Rejected("invalidated", CODE_REFUSALS["invalidated"])
    assert otp_delivery_verdict(fold_otp(given), otp_given.cid(1), now=T0) == "invalidated"


def test_otp_invalidation_closes_only_the_open_challenge() -> None:
    given = [otp_given.issued(1, T0)]
    decision = decide_otp_invalidation(fold_otp(given), reason=REASON, now=T0)
    assert decision.events == (OtpChallengeInvalidated(otp_given.cid(1), REASON, T0),)


@pytest.mark.parametrize("reason", ["", "   ", "mail alice@example.com back", "two\nlines"])
def test_a_blank_reason_or_one_with_an_address_is_refused(reason: str) -> None:
    with pytest.raises(InvalidInput):
        decide_reset_invalidation(fold_reset([requested(1, T0)]), reason=reason, now=T0)


def test_the_flow_is_reset_or_otp() -> None:
    assert check_flow("otp") == "otp"
    with pytest.raises(InvalidInput):
        check_flow("sms")


def test_a_fresh_request_carries_the_support_action_and_reason_beside_the_caller() -> None:
    assert support_metadata({"client": "acme"}, REASON, "resend") == {
        "client": "acme", "support_action": "resend", "support_reason": REASON}
