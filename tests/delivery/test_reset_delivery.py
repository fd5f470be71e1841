"""Password reset from request to inbox: one fresh email per request, whatever happens."""

from __future__ import annotations

import logging
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from attrs import evolve
from sqlalchemy import Engine

from domain.email import LeaseClaimed, LeaseExpired, ProviderAccepted
from domain.errors import TokenInvalid
from infra.errors import RateLimited
from domain.policy import ResetPolicy
from domain.reset import RequestReset
from domain.reset_events import ResetRequestRefused, reset_stream
from infra.clock import ManualClock
from infra.logs import FIELDS
from infra.delivery.fresh import prepare
from infra.delivery.pipeline import deliver
from infra.delivery.leases import claim_due, record_outcome
from infra.delivery.providers.smtp import SmtpMailer
from infra.services.reset import consume_token, request_reset, verify_token
from infra.services.unit_of_work import ServiceContext
from infra.delivery.worker import Worker
from tests.support.log_reading import email_event_types, stream_events
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log
from tests.support.smtp_relay import Relay, start_relay

SENDER = "authledger <no-reply@app.test>"


def token_in(email_text: str) -> str:
    link = next(line for line in email_text.splitlines() if line.startswith("https://app.test/reset?"))
    return parse_qs(urlsplit(link).query)["token"][0]


def no_cooldown(ctx: ServiceContext) -> ServiceContext:
    return evolve(ctx, reset_policy=ResetPolicy(cooldown=timedelta(0)))


def drain(ctx: ServiceContext, mailer: RecordingMailer, **options: int) -> dict[str, int]:
    return Worker(ctx, mailer, sender=SENDER, **options).drain()


def test_two_requests_before_any_worker_send_one_email_with_the_newest_token(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    ctx = no_cooldown(ctx)
    older = request_reset(ctx, RequestReset("42", "ada@example.test"))
    clock.advance(1)
    newer = request_reset(ctx, RequestReset("42", "ada@example.test"))
    mailer = RecordingMailer()

    assert drain(ctx, mailer) == {"sent": 1, "skipped": 1}

    [email] = mailer.emails
    assert email.message_id == newer.message_id
    assert verify_token(ctx, token_in(email.text_body)).request_id == newer.request_id
    assert email_event_types(engine, older.message_id)[-1] == "DeliverySkipped"
    assert stream_events(engine, f"email:{older.message_id}")[-1].reason == "superseded"
    assert_projections_match_log(engine)


def test_a_repeat_within_the_cooldown_returns_the_open_request_and_queues_nothing(ctx: ServiceContext) -> None:
    first = request_reset(ctx, RequestReset("42", "ada@example.test"))
    again = request_reset(ctx, RequestReset("42", "ada@example.test"))
    assert again.reused and again.request_id == first.request_id
    assert drain(ctx, RecordingMailer()) == {"sent": 1}


def test_a_superseded_token_no_longer_verifies(ctx: ServiceContext, clock: ManualClock) -> None:
    ctx = no_cooldown(ctx)
    request_reset(ctx, RequestReset("7", "bo@example.test"))
    mailer = RecordingMailer()
    drain(ctx, mailer)
    old_token = token_in(mailer.emails[0].text_body)
    clock.advance(5)
    request_reset(ctx, RequestReset("7", "bo@example.test"))
    with pytest.raises(TokenInvalid, match="replaced"):
        verify_token(ctx, old_token)


def test_a_worker_that_dies_after_sending_is_followed_by_one_logical_send(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    request = request_reset(ctx, RequestReset("42", "ada@example.test"))
    mailer = RecordingMailer()
    with engine.begin() as connection:
        [claim] = claim_due(connection, owner="w1", limit=10, now=clock.now(), policy=ctx.delivery_policy)
    # w1 hands the email to the provider, then dies before recording anything.
    mailer.send(prepare(ctx, claim, sender=SENDER).email)
    clock.advance(ctx.delivery_policy.lease + timedelta(seconds=1))

    assert drain(ctx, mailer) == {"sent": 1}

    types = email_event_types(engine, request.message_id)
    assert types == ["EmailQueued", "LeaseClaimed", "LeaseExpired", "LeaseClaimed", "ProviderAccepted"]
    events = stream_events(engine, f"email:{request.message_id}")
    assert [e.attempt for e in events if isinstance(e, LeaseClaimed)] == [1, 2]
    assert isinstance(events[2], LeaseExpired) and events[2].lease_owner == "w1"
    assert mailer.calls[str(request.message_id)] == 2, "the same idempotency key both times"
    assert len(mailer.emails) == 1, "one logical send"
    assert_projections_match_log(engine)


def test_a_worker_whose_lease_was_taken_over_records_nothing(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    request = request_reset(ctx, RequestReset("42", "ada@example.test"))
    with engine.begin() as connection:
        [stale] = claim_due(connection, owner="w1", limit=1, now=clock.now(), policy=ctx.delivery_policy)
    clock.advance(ctx.delivery_policy.lease + timedelta(seconds=1))
    with engine.begin() as connection:
        [fresh] = claim_due(connection, owner="w2", limit=1, now=clock.now(), policy=ctx.delivery_policy)
    late = ProviderAccepted(request.message_id, stale.lease_token, 1, clock.now(), "recording", "x", "k2")

    with engine.begin() as connection:
        assert record_outcome(connection, stale, [late], owner="w1") is False

    assert email_event_types(engine, request.message_id) == [
        "EmailQueued", "LeaseClaimed", "LeaseExpired", "LeaseClaimed",
    ]
    assert deliver(ctx, stale, RecordingMailer(), owner="w1", sender=SENDER) == "lease_lost"
    assert deliver(ctx, fresh, RecordingMailer(), owner="w2", sender=SENDER) == "sent"
    assert_projections_match_log(engine)


def test_a_window_of_sixteen_sends_two_hundred_messages_once_each(ctx: ServiceContext, engine: Engine) -> None:
    requests = [request_reset(ctx, RequestReset(f"user-{n}", f"u{n}@example.test")) for n in range(200)]
    mailer = RecordingMailer()

    assert drain(ctx, mailer, inflight=16, batch=5) == {"sent": 200}

    assert sorted(str(e.message_id) for e in mailer.emails) == sorted(str(r.message_id) for r in requests)
    assert set(mailer.calls.values()) == {1}, "no message was handed to the provider twice"
    for request in requests:
        assert email_event_types(engine, request.message_id) == ["EmailQueued", "LeaseClaimed", "ProviderAccepted"]
    assert_projections_match_log(engine)


def test_a_retryable_failure_backs_off_and_the_retry_succeeds(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    request = request_reset(ctx, RequestReset("42", "ada@example.test"))
    mailer = RecordingMailer()
    mailer.fail_next = 1
    assert drain(ctx, mailer) == {"pending": 1}
    assert drain(ctx, mailer) == {}, "not due again before its backoff"
    clock.advance(ctx.delivery_policy.backoff_base)
    assert drain(ctx, mailer) == {"sent": 1}
    assert email_event_types(engine, request.message_id) == [
        "EmailQueued", "LeaseClaimed", "SendAttemptFailed", "LeaseClaimed", "ProviderAccepted",
    ]
    assert_projections_match_log(engine)


def test_a_message_is_abandoned_after_the_optional_attempt_limit_and_the_operator_is_warned(
    ctx: ServiceContext, engine: Engine, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = evolve(ctx, delivery_policy=evolve(ctx.delivery_policy, max_attempts=5))
    request = request_reset(ctx, RequestReset("42", "ada@example.test"))
    mailer = RecordingMailer()
    mailer.fail_next = 99
    for _ in range(5):
        drain(ctx, mailer)
        clock.advance(timedelta(minutes=1))  # past any backoff of five attempts, before the link expires
    assert email_event_types(engine, request.message_id)[-1] == "DeliveryAbandoned"
    assert mailer.emails == []
    [given_up] = [r for r in caplog.records if r.name == "authledger.delivery" and r.levelno == logging.WARNING]
    assert given_up.getMessage() == "delivery send_failed"
    assert given_up.__dict__[FIELDS]["state"] == "abandoned"
    assert_projections_match_log(engine)


def test_a_transient_failure_is_retried_until_the_link_expires_then_skipped_as_expired(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    request = request_reset(ctx, RequestReset("42", "ada@example.test"))
    expires_at = clock.now() + ctx.reset_policy.ttl
    mailer = RecordingMailer()
    mailer.fail_next = 10_000  # the provider is down for longer than the link lives
    while clock.now() <= expires_at + timedelta(minutes=1):
        drain(ctx, mailer)
        clock.advance(timedelta(seconds=61))  # past the longest backoff

    events = stream_events(engine, f"email:{request.message_id}")
    failures = [e for e in events if type(e).__name__ == "SendAttemptFailed"]
    assert len(failures) > 5, "an outage longer than five quick attempts does not end the message"
    assert all(f.retry_at <= expires_at for f in failures), "no retry is scheduled past the link's expiry"
    assert type(events[-1]).__name__ == "DeliverySkipped" and events[-1].reason == "expired"
    assert "DeliveryAbandoned" not in email_event_types(engine, request.message_id)
    assert mailer.emails == []
    assert_projections_match_log(engine)


def test_an_expired_request_is_never_sent(ctx: ServiceContext, engine: Engine, clock: ManualClock) -> None:
    request = request_reset(ctx, RequestReset("42", "ada@example.test"))
    clock.advance(ctx.reset_policy.ttl)
    mailer = RecordingMailer()
    assert drain(ctx, mailer) == {"skipped": 1}
    assert mailer.emails == []
    assert stream_events(engine, f"email:{request.message_id}")[-1].reason == "expired"


def test_a_consumed_token_cannot_be_consumed_again_and_the_owner_is_told(
    ctx: ServiceContext, engine: Engine
) -> None:
    request_reset(ctx, RequestReset("42", "ada@example.test"))
    mailer = RecordingMailer()
    drain(ctx, mailer)
    token = token_in(mailer.emails[0].text_body)

    assert consume_token(ctx, token).user_id == "42"
    with pytest.raises(TokenInvalid, match="already used"):
        consume_token(ctx, token)
    with pytest.raises(TokenInvalid):
        verify_token(ctx, token)

    drain(ctx, mailer)
    assert [e.subject for e in mailer.emails] == ["Reset your password", "Your password was changed"]
    assert_projections_match_log(engine)


def test_the_hourly_limit_refuses_and_the_refusal_is_in_the_log(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    ctx = no_cooldown(ctx)
    for _ in range(ctx.reset_policy.hourly_limit):
        request_reset(ctx, RequestReset("42", "ada@example.test"))
        clock.advance(1)
    with pytest.raises(RateLimited) as refused:
        request_reset(ctx, RequestReset("42", "ada@example.test"))
    assert refused.value.retry_at > clock.now()
    refusals = [e for e in stream_events(engine, reset_stream("42")) if isinstance(e, ResetRequestRefused)]
    assert len(refusals) == 1 and refusals[0].reason == "rate_limited"
    assert_projections_match_log(engine)


def test_a_malformed_or_unknown_token_is_refused_without_echoing_it(ctx: ServiceContext) -> None:
    for token in ["short", "x" * 43, "../../etc/passwd" + "a" * 27]:
        with pytest.raises(TokenInvalid) as error:
            verify_token(ctx, token)
        assert token not in str(error.value)


def test_the_worker_delivers_through_a_real_smtp_server_and_retries_a_refusal(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    relay = Relay()
    controller = start_relay(relay)
    try:
        relay.refusals["DATA"].append("451 4.3.0 try again later")
        mailer = SmtpMailer("127.0.0.1", relay.port, sender="bounces@app.test", security="none", timeout=5.0)
        request = request_reset(ctx, RequestReset("42", "ada@example.test"))

        assert Worker(ctx, mailer, sender=SENDER).drain() == {"pending": 1}
        clock.advance(ctx.delivery_policy.backoff_base)
        assert Worker(ctx, mailer, sender=SENDER).drain() == {"sent": 1}
    finally:
        controller.stop()

    [message] = relay.messages()
    assert message["Message-ID"] == f"<{request.message_id}@authledger>"
    assert message["To"] == "ada@example.test" and message["Subject"] == "Reset your password"
    text = message.get_body(preferencelist=("plain",)).get_content()
    html = message.get_body(preferencelist=("html",)).get_content()
    token = token_in(text)
    assert token in html and verify_token(ctx, token).request_id == request.request_id
    events = stream_events(engine, f"email:{request.message_id}")
    assert [type(e).__name__ for e in events] == [
        "EmailQueued", "LeaseClaimed", "SendAttemptFailed", "LeaseClaimed", "ProviderAccepted",
    ]
    assert events[2].retryable and "451" in events[2].error
    assert events[-1].provider_message_id == f"<{request.message_id}@authledger>"
    assert_projections_match_log(engine)
