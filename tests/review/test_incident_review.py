"""The three worked cases of docs/incident-review.md: `explain` answers each from the log alone."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine
from sqlalchemy import text as sql

from domain.errors import CodeRejected, NotFound
from domain.otp import RequestOtp
from infra.review.history import explain, history
from infra.services.otp import request_otp, verify_code
from infra.services.unit_of_work import ServiceContext
from projections.explain import sentences
from tests.support.incidents import (
    WEB, SmtpMailer, at, deliver_due, duplicate_emails, incident_context, later, missing_email, stale_link,
)
from tests.support.replay import assert_projections_match_log


def test_a_duplicate_email_complaint_is_explained_by_two_requests_and_a_crashed_worker(
    ctx: ServiceContext, engine: Engine
) -> None:
    ids = duplicate_emails(ctx, engine)
    review = history(engine, "42", now=later())
    text = "\n".join(sentences(review.findings))
    assert (f"Reset request {ids['first_request']} was superseded by {ids['second_request']} "
            "at 2024-05-01 10:02:11.000+00:00") in text
    assert (f"Reset request {ids['second_request']}'s email {ids['second_message']} was accepted by provider smtp at "
            "2024-05-01 10:03:00.000+00:00") in text
    assert "on attempt 2 by w2, after the lease of w1 expired." in text
    assert "2 emails to user 42 were accepted by the provider" in text
    assert_projections_match_log(engine)


def test_a_missing_email_is_explained_by_the_provider_refusing_every_attempt(
    ctx: ServiceContext, engine: Engine
) -> None:
    ids = missing_email(ctx, engine)
    review = explain(engine, message_id=ids["message"], now=later())
    text = "\n".join(sentences(review.findings))
    email = f"Reset request {ids['request']}'s email {ids['message']}"
    assert f"{email}: attempt 1 by w1 failed at 2024-05-01 10:01:00.000+00:00: provider busy (421)" in text
    assert f"{email}: attempt 5 by w1 failed at 2024-05-01 10:05:00.000+00:00: provider busy (421); " \
           "that was the last attempt allowed." in text
    assert f"{email} was abandoned at 2024-05-01 10:05:00.000+00:00 after 5 attempts" in text
    assert "it was not sent." in text
    assert f"Reset request {ids['request']} expired unused at 2024-05-01 10:30:00.000+00:00." in text
    assert [e.event_type for e in review.timeline].count("SendAttemptFailed") == 5
    assert_projections_match_log(engine)


def test_a_stale_link_is_explained_by_the_newer_request_that_replaced_it(
    ctx: ServiceContext, engine: Engine
) -> None:
    ids = stale_link(ctx, engine)
    review = explain(engine, request_id=ids["old_request"], now=later())
    text = "\n".join(sentences(review.findings))
    assert (f"Reset request {ids['old_request']} was superseded by {ids['new_request']} at "
            "2024-05-01 10:05:00.000+00:00; its link or code stopped working then.") in text
    assert (f"Reset request {ids['old_request']}'s email {ids['old_message']} was accepted by provider smtp at "
            "2024-05-01 10:00:02.000+00:00") in text
    assert (f"Reset request {ids['new_request']}'s link was used at 2024-05-01 10:08:00.000+00:00 by "
            "client:acme-web: the password was changed") in text
    assert "(password changed notice) was accepted by provider smtp at 2024-05-01 10:08:01.000+00:00" in text
    assert {e.request_id for e in review.timeline} == {ids["old_request"], ids["new_request"]}
    assert_projections_match_log(engine)


def test_history_as_of_a_moment_shows_only_what_had_happened_by_then(ctx: ServiceContext, engine: Engine) -> None:
    ids = stale_link(ctx, engine)
    with engine.connect() as connection:
        second_request_at = connection.execute(sql(
            "SELECT recorded_at FROM events WHERE event_type = 'ResetSuperseded'")).scalar_one()
    before = history(engine, "9", as_of=second_request_at - timedelta(microseconds=1), now=later())
    assert [e.event_type for e in before.timeline] == ["ResetRequested", "EmailQueued", "LeaseClaimed",
                                                       "ProviderAccepted"]
    assert not any(str(ids["new_request"]) in line for line in sentences(before.findings))


def test_otp_challenges_are_explained_like_reset_requests(ctx: ServiceContext, engine: Engine) -> None:
    ctx, clock = incident_context(ctx, 0xD00)
    mailer = SmtpMailer()
    first = request_otp(ctx, RequestOtp("5", "di@example.test"), WEB)
    at(clock, "10:01:30")
    second = request_otp(ctx, RequestOtp("5", "di@example.test"), WEB)  # past the cooldown: supersedes
    at(clock, "10:01:31")
    deliver_due(ctx, mailer, "w1")
    code = next(line for line in mailer.emails[-1].text_body.splitlines() if line.strip().isdigit()).strip()
    at(clock, "10:02:00")
    with pytest.raises(CodeRejected):
        verify_code(ctx, second.request_id, str((int(code) + 1) % 10 ** len(code)).zfill(len(code)), WEB, user_id="5")
    verify_code(ctx, second.request_id, code, WEB, user_id="5")

    text = "\n".join(sentences(explain(engine, request_id=first.request_id, now=later()).findings))
    assert f"OTP challenge {first.request_id} was superseded by {second.request_id} at " \
           "2024-05-01 10:01:30.000+00:00" in text
    assert f"OTP challenge {first.request_id}'s email {first.message_id} was skipped (superseded) by worker w1" in text
    assert (f"OTP challenge {second.request_id}: a wrong code was entered at 2024-05-01 10:02:00.000+00:00 by "
            "client:acme-web (wrong code 1 on this challenge, 1 in a row for the account).") in text
    assert f"OTP challenge {second.request_id}: its code was verified at 2024-05-01 10:02:00.000+00:00." in text
    otp_only = history(engine, "5", flow="otp", now=later())
    assert {e.event_type for e in otp_only.timeline} >= {"OtpVerificationFailed", "OtpChallengeVerified"}
    with pytest.raises(NotFound, match="no events about user '5' in the reset flow"):
        history(engine, "5", flow="reset", now=later())
    assert_projections_match_log(engine)
