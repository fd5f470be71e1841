"""Re-drive: abandoned or failed mail sent again on an operator's word, once, and only while still wanted."""

from __future__ import annotations

import threading
from datetime import timedelta
from uuid import UUID

import attrs
import pytest
from sqlalchemy import Engine, text

from domain.delivery import DeliveryPolicy
from domain.email import DeliveryRedriven, DeliverySkipped, email_stream
from domain.errors import InvalidInput, NotFound
from domain.log import RecordedEvent
from domain.reset import RequestReset
from domain.reset_events import reset_stream
from infra.clock import ManualClock
from infra.delivery.redrive import Selection, redrive, redrive_preview
from infra.delivery.worker import Worker
from infra.eventlog.postgres import PostgresEventStore
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from projections.explain import explain_user
from projections.timeline import timeline
from tests.support.log_reading import email_event_types, stream_events
from tests.support.mailers import RecordingMailer, RefusingMailer
from tests.support.replay import assert_projections_match_log

SENDER = "authledger <no-reply@app.test>"
OPERATOR = {"actor": "cli:alice", "client": "cli", "command": "outbox retry"}


@pytest.fixture
def capped(ctx: ServiceContext) -> ServiceContext:
    """Services with a hard cap of two attempts, so that an outage abandons mail."""
    return attrs.evolve(ctx, delivery_policy=DeliveryPolicy(max_attempts=2))


def abandon(ctx: ServiceContext, clock: ManualClock, user_id: str = "1") -> UUID:
    """A reset email abandoned after two failed attempts; its message id."""
    message_id = request_reset(ctx, RequestReset(user_id, f"user{user_id}@example.test")).message_id
    mailer = RecordingMailer()
    mailer.fail_next = 2
    assert Worker(ctx, mailer, sender=SENDER).drain() == {"pending": 1}
    clock.advance(ctx.delivery_policy.backoff_cap)
    assert Worker(ctx, mailer, sender=SENDER).drain() == {"abandoned": 1}
    return message_id


def recorded_story(engine: Engine, user_id: str, message_id: UUID) -> list[RecordedEvent]:
    with engine.connect() as connection:
        store = PostgresEventStore(connection)
        return store.load(reset_stream(user_id)) + store.load(email_stream(message_id))


def outbox_state(engine: Engine, message_id: UUID) -> str:
    with engine.connect() as connection:
        return connection.execute(text("SELECT state FROM email_outbox WHERE message_id = :m"),
                                  {"m": message_id}).scalar_one()


def event_count(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(text("SELECT count(*) FROM events")).scalar_one()


def test_a_redriven_abandoned_message_is_recorded_and_then_sent_exactly_once(
    capped: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    message_id = abandon(capped, clock)
    clock.advance(60)

    plan = redrive(capped, Selection(message_id=message_id), reason="provider outage is over", metadata=OPERATOR)

    assert [row.message_id for row in plan.rows] == [message_id]
    recorded = stream_events(engine, email_stream(message_id))[-1]
    assert recorded == DeliveryRedriven(message_id, clock.now(), "cli:alice", "provider outage is over")
    assert outbox_state(engine, message_id) == "pending"
    mailer = RecordingMailer()
    assert Worker(capped, mailer, sender=SENDER).drain() == {"sent": 1}
    assert Worker(capped, mailer, sender=SENDER).drain() == {}
    assert mailer.calls == {str(message_id): 1}
    assert email_event_types(engine, message_id)[-3:] == ["DeliveryRedriven", "LeaseClaimed", "ProviderAccepted"]
    assert_projections_match_log(engine)
    story = recorded_story(engine, "1", message_id)
    said = explain_user(story, "1", now=clock.now())
    assert any("was re-driven by cli:alice at" in line and "(provider outage is over)" in line for line in said)
    assert "re-driven by cli:alice (provider outage is over): queued again" in [e.summary for e in timeline(story)]


def test_an_attempt_cap_counts_from_the_redrive_so_one_more_failure_does_not_abandon_it(
    capped: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    message_id = abandon(capped, clock)
    redrive(capped, Selection(message_id=message_id), reason="retry after outage", metadata=OPERATOR)

    mailer = RecordingMailer()
    mailer.fail_next = 1
    assert Worker(capped, mailer, sender=SENDER).drain() == {"pending": 1}, "attempt 1 of 2 since the re-drive"
    clock.advance(capped.delivery_policy.backoff_cap)
    assert Worker(capped, mailer, sender=SENDER).drain() == {"sent": 1}
    assert_projections_match_log(engine)


def test_a_redriven_message_whose_link_expired_is_recorded_then_skipped_as_expired(
    capped: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    message_id = abandon(capped, clock)
    clock.advance(capped.reset_policy.ttl)

    redrive(capped, Selection(message_id=message_id), reason="customer asked", metadata=OPERATOR)

    mailer = RecordingMailer()
    assert Worker(capped, mailer, sender=SENDER).drain() == {"skipped": 1}
    assert mailer.calls == {}, "an expired link is never sent"
    events = stream_events(engine, email_stream(message_id))
    assert isinstance(events[-3], DeliveryRedriven)
    assert isinstance(events[-1], DeliverySkipped) and events[-1].reason == "expired"
    assert_projections_match_log(engine)


def test_a_permanently_failed_message_can_be_redriven(ctx: ServiceContext, engine: Engine) -> None:
    message_id = request_reset(ctx, RequestReset("1", "typo@example.test")).message_id
    assert Worker(ctx, RefusingMailer(), sender=SENDER).drain() == {"failed": 1}

    redrive(ctx, Selection(message_id=message_id), reason="mailbox restored", metadata=OPERATOR)

    assert Worker(ctx, RecordingMailer(), sender=SENDER).drain() == {"sent": 1}
    assert_projections_match_log(engine)


def test_the_preview_shows_the_messages_and_writes_nothing(
    capped: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    message_id = abandon(capped, clock)
    before = event_count(engine)

    plan = redrive_preview(capped, Selection(abandoned_since=None), reason="outage over", metadata=OPERATOR)

    assert [(row.message_id, row.state, row.attempt_count, row.last_error) for row in plan.rows] == [
        (message_id, "abandoned", 2, "provider busy (421)")
    ]
    assert event_count(engine) == before
    assert outbox_state(engine, message_id) == "abandoned"


def test_all_abandoned_since_a_time_are_redriven_together_and_the_rest_stay(
    capped: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    earlier = abandon(capped, clock, "1")
    clock.advance(timedelta(hours=1))
    since = clock.now()
    later = [abandon(capped, clock, user) for user in ("2", "3")]

    plan = redrive(capped, Selection(abandoned_since=since), reason="outage over", metadata=OPERATOR)

    assert sorted(row.message_id for row in plan.rows) == sorted(later)
    assert [outbox_state(engine, m) for m in later] == ["pending", "pending"]
    assert outbox_state(engine, earlier) == "abandoned"
    assert Worker(capped, RecordingMailer(), sender=SENDER).drain() == {"sent": 2}
    assert_projections_match_log(engine)


@pytest.mark.parametrize("state", ["pending", "sent", "skipped"])
def test_a_message_that_did_not_give_up_cannot_be_redriven(
    ctx: ServiceContext, engine: Engine, clock: ManualClock, state: str
) -> None:
    message_id = request_reset(ctx, RequestReset("1", "ada@example.test")).message_id
    if state == "sent":
        Worker(ctx, RecordingMailer(), sender=SENDER).drain()
    elif state == "skipped":
        clock.advance(ctx.reset_policy.ttl)  # nobody sent it in time: the link expired
        Worker(ctx, RecordingMailer(), sender=SENDER).drain()
    assert outbox_state(engine, message_id) == state
    before = event_count(engine)

    for act in (redrive, redrive_preview):
        with pytest.raises(InvalidInput, match=f"is {state}: only abandoned or failed"):
            act(ctx, Selection(message_id=message_id), reason="why not", metadata=OPERATOR)
    assert event_count(engine) == before


def test_an_unknown_message_or_a_blank_reason_is_refused(
    capped: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    message_id = abandon(capped, clock)
    before = event_count(engine)

    with pytest.raises(NotFound, match="no message"):
        redrive(capped, Selection(message_id=UUID(int=7)), reason="typo", metadata=OPERATOR)
    for reason in ("", "   ", "two\nlines", "x" * 501, "ada@example.test asked"):
        with pytest.raises(InvalidInput, match="reason"):
            redrive(capped, Selection(message_id=message_id), reason=reason, metadata=OPERATOR)
    assert event_count(engine) == before


def test_two_operators_redriving_at_once_redrive_each_message_once(
    capped: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    lost = [abandon(capped, clock, user) for user in ("1", "2", "3")]
    start = threading.Barrier(2)
    outcomes: list[object] = []

    def operator(name: str) -> None:
        start.wait()
        try:
            outcomes.append(redrive(capped, Selection(), reason="outage over", metadata={"actor": name}))
        except Exception as error:  # noqa: BLE001 - the test reports whatever either thread met
            outcomes.append(error)

    threads = [threading.Thread(target=operator, args=(name,)) for name in ("cli:alice", "cli:bob")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    redriven = [sum(isinstance(e, DeliveryRedriven) for e in stream_events(engine, email_stream(m))) for m in lost]
    assert redriven == [1, 1, 1], outcomes
    assert sorted(len(plan.rows) for plan in outcomes) == [0, 3]  # type: ignore[attr-defined]
    assert_projections_match_log(engine)
