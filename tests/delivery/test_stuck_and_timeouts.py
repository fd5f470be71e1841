"""What operators rely on: stuck messages explained, provider timeouts retried without a second email."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Engine

from domain.email import SendAttemptFailed
from domain.reset import RequestReset
from infra.clock import ManualClock
from infra.delivery.leases import claim_due
from infra.delivery.status import stuck_messages
from infra.delivery.providers.http import HttpMailer
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from infra.delivery.worker import Worker
from tests.support.http_provider import FakeHttpProvider
from tests.support.log_reading import stream_events
from tests.support.replay import assert_projections_match_log

SENDER = "authledger <no-reply@app.test>"


def test_a_provider_timeout_is_an_unknown_outcome_retried_with_the_same_key(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    request = request_reset(ctx, RequestReset("42", "ada@example.test"))
    with FakeHttpProvider() as provider:
        impatient = HttpMailer(f"{provider.url}", timeout=0.3)
        provider.delay(1.0)  # the provider sends, then answers too late
        assert Worker(ctx, impatient, sender=SENDER).drain() == {"pending": 1}
        provider.delay(0)
        clock.advance(ctx.delivery_policy.backoff_base)
        # The retry must not race a 0.3 s limit on a busy machine: what it
        # shows is the key reused, not how fast loopback answers.
        with HttpMailer(f"{provider.url}", timeout=10) as patient:
            assert Worker(ctx, patient, sender=SENDER).drain() == {"sent": 1}

        assert provider.sends_by_key == {str(request.message_id): 1}, "one email, not two"
        assert provider.requests_by_key[str(request.message_id)] == 2
    failed = [e for e in stream_events(engine, f"email:{request.message_id}") if isinstance(e, SendAttemptFailed)]
    assert len(failed) == 1 and failed[0].outcome_unknown and failed[0].retryable
    assert_projections_match_log(engine)


def test_stuck_messages_say_why(ctx: ServiceContext, engine: Engine, clock: ManualClock) -> None:
    abandoned_lease = request_reset(ctx, RequestReset("2", "b@example.test"))
    with engine.begin() as connection:
        claim_due(connection, owner="dead-worker", limit=1, now=clock.now(), policy=ctx.delivery_policy)
    never_claimed = request_reset(ctx, RequestReset("1", "a@example.test"))
    clock.advance(ctx.delivery_policy.lease + timedelta(minutes=2))

    stuck = {m["message_id"]: m for m in stuck_messages(engine, now=clock.now(), older_than_seconds=60)}

    assert set(stuck) == {str(never_claimed.message_id), str(abandoned_lease.message_id)}
    assert "no worker has claimed it" in stuck[str(never_claimed.message_id)]["reason"]
    assert "lease of dead-worker ran out" in stuck[str(abandoned_lease.message_id)]["reason"]
    assert stuck_messages(engine, now=clock.now(), older_than_seconds=3600) == []
