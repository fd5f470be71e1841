"""An email whose send may have reached an SMTP relay unanswered is sent again at most once.

SMTP cannot drop a repeat of a message id, so every retry after an unknown
outcome (a connection lost after DATA, a worker killed mid-send) may be one
more copy of the same link in the user's inbox. These tests drive real
relays (aiosmtpd) and real leases, and count the copies the relay kept.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from sqlalchemy import Engine, text

from domain.email import DeliveryOutcomeUnknown, LeaseExpired, SendAttemptFailed
from domain.reset import RequestReset
from infra.clock import ManualClock
from infra.delivery.fresh import prepare
from infra.delivery.leases import claim_due
from infra.delivery.providers.smtp import SmtpMailer
from infra.delivery.worker import Worker
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.support.mailers import RecordingMailer
from tests.support.log_reading import email_event_types, stream_events
from tests.support.replay import assert_projections_match_log
from tests.support.smtp_relay import Relay

SENDER = "authledger <no-reply@app.test>"


@contextmanager
def smtp_to(relay: Relay) -> Iterator[SmtpMailer]:
    mailer = SmtpMailer("127.0.0.1", relay.port, sender="bounces@app.test", security="none", timeout=5.0)
    try:
        yield mailer
    finally:
        mailer.close()


def message_id_header(request: object) -> str:
    return f"<{request.message_id}@authledger>"  # type: ignore[attr-defined]


def outbox_states(engine: Engine) -> Counter[str]:
    with engine.connect() as connection:
        return Counter(dict(connection.execute(text("SELECT state, count(*) FROM email_outbox GROUP BY state")).all()))


def deliver_until_settled(ctx: ServiceContext, engine: Engine, clock: ManualClock, worker: Worker) -> None:
    """Drain, then let every retry fall due, until no message is pending (each round settles some)."""
    for _ in range(20):
        worker.drain()
        if not outbox_states(engine)["pending"]:
            return
        clock.advance(ctx.delivery_policy.backoff_cap)
    raise AssertionError(f"messages still pending: {outbox_states(engine)}")


def test_a_relay_dropping_one_connection_in_five_after_data_gets_every_email_and_none_three_times(
    ctx: ServiceContext, engine: Engine, clock: ManualClock, relay: Relay
) -> None:
    relay.drop_after_data = lambda number: number % 5 == 0
    requests = [request_reset(ctx, RequestReset(f"user-{n}", f"user{n}@example.test")) for n in range(300)]

    with smtp_to(relay) as mailer:
        deliver_until_settled(ctx, engine, clock, Worker(ctx, mailer, sender=SENDER))

    copies = Counter(message["Message-ID"] for message in relay.messages())
    assert set(copies) == {message_id_header(r) for r in requests}, "every email reached the relay"
    assert relay.data_commands > 300, "some connections were dropped, and those emails sent again"
    assert max(copies.values()) == 2, "a dropped send is retried once, never a third time"
    states = outbox_states(engine)
    assert set(states) <= {"sent", "unknown"} and sum(states.values()) == 300
    for request in requests:
        if copies[message_id_header(request)] == 1:
            assert email_event_types(engine, request.message_id)[-1] == "ProviderAccepted"
    assert_projections_match_log(engine)


def test_a_second_unanswered_send_leaves_the_email_unknown_instead_of_sending_a_third_copy(
    ctx: ServiceContext, engine: Engine, clock: ManualClock, relay: Relay
) -> None:
    relay.drop_after_data = lambda number: True
    request = request_reset(ctx, RequestReset("42", "ada@example.test"))

    with smtp_to(relay) as mailer:
        deliver_until_settled(ctx, engine, clock, Worker(ctx, mailer, sender=SENDER))

    assert len(relay.messages()) == 2
    assert email_event_types(engine, request.message_id) == [
        "EmailQueued", "LeaseClaimed", "SendAttemptFailed", "LeaseClaimed", "SendAttemptFailed",
        "LeaseClaimed", "DeliveryOutcomeUnknown",
    ]
    events = stream_events(engine, f"email:{request.message_id}")
    assert all(e.outcome_unknown for e in events if isinstance(e, SendAttemptFailed))
    [settled] = [e for e in events if isinstance(e, DeliveryOutcomeUnknown)]
    assert settled.unknown_outcomes == 2
    assert outbox_states(engine) == {"unknown": 1}
    assert_projections_match_log(engine)


def test_workers_killed_mid_send_twice_leave_the_email_unknown_after_one_more_copy(
    ctx: ServiceContext, engine: Engine, clock: ManualClock, relay: Relay
) -> None:
    request = request_reset(ctx, RequestReset("42", "ada@example.test"))
    with smtp_to(relay) as mailer:
        for dead in ("w1", "w2"):
            with engine.begin() as connection:
                [claim] = claim_due(connection, owner=dead, limit=1, now=clock.now(), policy=ctx.delivery_policy)
            # The worker hands the email to the relay, then dies before recording anything.
            mailer.send(prepare(ctx, claim, sender=SENDER).email)
            clock.advance(ctx.delivery_policy.lease + timedelta(seconds=1))

        assert Worker(ctx, mailer, sender=SENDER).drain() == {"unknown": 1}

    assert len(relay.messages()) == 2, "the two the dead workers sent; the third worker sends none"
    events = stream_events(engine, f"email:{request.message_id}")
    assert [type(e).__name__ for e in events] == [
        "EmailQueued", "LeaseClaimed", "LeaseExpired", "LeaseClaimed", "LeaseExpired", "LeaseClaimed",
        "DeliveryOutcomeUnknown",
    ]
    assert [e.lease_owner for e in events if isinstance(e, LeaseExpired)] == ["w1", "w2"]
    assert_projections_match_log(engine)


def test_leases_run_out_any_number_of_times_before_a_provider_that_drops_repeats_sends_the_email(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    request = request_reset(ctx, RequestReset("42", "ada@example.test"))
    for dead in ("w1", "w2", "w3"):
        with engine.begin() as connection:
            claim_due(connection, owner=dead, limit=1, now=clock.now(), policy=ctx.delivery_policy)
        clock.advance(ctx.delivery_policy.lease + timedelta(seconds=1))
    # A provider that drops a repeat of a message id (as HTTP providers do on
    # the idempotency key): another try cannot be another copy.
    mailer = RecordingMailer()

    assert Worker(ctx, mailer, sender=SENDER).drain() == {"sent": 1}

    assert email_event_types(engine, request.message_id)[-1] == "ProviderAccepted"
    assert len(mailer.emails) == 1
