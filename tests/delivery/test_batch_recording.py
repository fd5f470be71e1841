"""When outcomes are recorded: in groups for providers that drop repeats, as each send completes otherwise.

A window of one makes the order of sends, and so what each send sees, certain.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import Engine, text

from domain.reset import RequestReset
from infra.clock import ManualClock
from infra.delivery.pipeline import deliver_batch
from infra.delivery.leases import Claim, claim_due
from infra.delivery.providers import OutboundEmail, ProviderReceipt
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from infra.delivery.worker import Worker
from tests.support.log_reading import email_event_types
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log

SENDER = "authledger <no-reply@app.test>"


class WatchingMailer(RecordingMailer):
    """Notes, at each send, the outbox state of every message it was handed before."""

    def __init__(self, engine: Engine, *, idempotent: bool) -> None:
        super().__init__()
        self.engine, self.idempotent = engine, idempotent
        self.earlier_states: list[set[str]] = []

    def send(self, email: OutboundEmail) -> ProviderReceipt:
        earlier = [str(e.message_id) for e in self.emails]
        with self.engine.connect() as connection:
            states = connection.execute(
                text("SELECT state FROM email_outbox WHERE message_id = ANY(CAST(:ids AS uuid[]))"), {"ids": earlier}
            ).scalars()
            self.earlier_states.append(set(states))
        return super().send(email)


class DiesOnThirdSend(RecordingMailer):
    """An idempotent provider whose worker process dies while handing it one given message."""

    killed = False

    def __init__(self, fatal: str) -> None:
        super().__init__()
        self.fatal = fatal

    def send(self, email: OutboundEmail) -> ProviderReceipt:
        if str(email.message_id) == self.fatal and not self.killed:
            self.killed = True
            raise KeyboardInterrupt("the worker was killed")  # escapes every handler, as a kill would
        return super().send(email)


def queue(ctx: ServiceContext, count: int) -> list[str]:
    return [str(request_reset(ctx, RequestReset(f"user-{n}", f"u{n}@example.test")).message_id) for n in range(count)]


def claim(ctx: ServiceContext, engine: Engine, owner: str, now: ManualClock, limit: int = 10) -> list[Claim]:
    with engine.begin() as connection:
        return claim_due(connection, owner=owner, limit=limit, now=now.now(), policy=ctx.delivery_policy)


def test_an_idempotent_provider_has_the_whole_batch_recorded_after_its_last_send(
    ctx: ServiceContext, engine: Engine
) -> None:
    queue(ctx, 3)
    mailer = WatchingMailer(engine, idempotent=True)

    assert Worker(ctx, mailer, sender=SENDER, inflight=1).drain() == {"sent": 3}

    assert mailer.earlier_states == [set(), {"leased"}, {"leased"}]
    assert_projections_match_log(engine)


class SlowWatchingMailer(WatchingMailer):
    """Each send takes 0.6 s of the test's clock."""

    def __init__(self, engine: Engine, clock: ManualClock) -> None:
        super().__init__(engine, idempotent=True)
        self.clock = clock

    def send(self, email: OutboundEmail) -> ProviderReceipt:
        receipt = super().send(email)
        self.clock.advance(0.6)
        return receipt


def test_a_slow_idempotent_provider_has_outcomes_recorded_within_a_second_not_at_the_end_of_the_batch(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    queue(ctx, 4)
    mailer = SlowWatchingMailer(engine, clock)

    assert Worker(ctx, mailer, sender=SENDER, inflight=1).drain() == {"sent": 4}

    # When the third send returned, the first outcome had waited 1.2 s: all three were recorded.
    assert mailer.earlier_states == [set(), {"leased"}, {"leased"}, {"sent"}]
    assert_projections_match_log(engine)


def test_a_provider_without_idempotency_has_each_outcome_recorded_before_the_next_send(
    ctx: ServiceContext, engine: Engine
) -> None:
    queue(ctx, 3)
    mailer = WatchingMailer(engine, idempotent=False)

    assert Worker(ctx, mailer, sender=SENDER, inflight=1).drain() == {"sent": 3}

    assert mailer.earlier_states == [set(), {"sent"}, {"sent"}]
    assert_projections_match_log(engine)


def test_a_worker_killed_mid_window_leaves_its_sends_to_be_repeated_once_each_under_the_same_key(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    first, second, third = queue(ctx, 3)
    mailer = DiesOnThirdSend(fatal=third)
    with pytest.raises(KeyboardInterrupt):
        Worker(ctx, mailer, sender=SENDER, owner="w1", batch=3).run_once()
    # The sends of one window run side by side: whether the two that returned
    # were recorded before the third killed the worker is a matter of timing,
    # as it is for a real kill. The send in hand never is.
    unrecorded = {m for m in (first, second, third) if email_event_types(engine, m)[-1] == "LeaseClaimed"}
    assert third in unrecorded

    clock.advance(ctx.delivery_policy.lease + timedelta(seconds=1))
    assert Worker(ctx, mailer, sender=SENDER, owner="w2", batch=3).drain() == {"sent": len(unrecorded)}

    for message_id in (first, second, third):
        repeated = ["LeaseExpired", "LeaseClaimed"] if message_id in unrecorded else []
        assert email_event_types(engine, message_id) == [
            "EmailQueued", "LeaseClaimed", *repeated, "ProviderAccepted",
        ]
    assert mailer.calls == {
        first: 2 if first in unrecorded else 1, second: 2 if second in unrecorded else 1, third: 1,
    }, "only unrecorded sends were repeated, under the same idempotency key"
    assert len(mailer.emails) == 3, "one logical send per message"
    assert_projections_match_log(engine)


class TakenOverWhileSending(RecordingMailer):
    """While the first message is being sent, another worker claims one message of the batch."""

    def __init__(self, ctx: ServiceContext, engine: Engine, clock: ManualClock) -> None:
        super().__init__()
        self.ctx, self.engine, self.clock = ctx, engine, clock
        self.taken_over: list[Claim] = []
        self._first = threading.Lock()

    def send(self, email: OutboundEmail) -> ProviderReceipt:
        with self._first:  # the batch's sends run side by side: one takeover, by whichever comes first
            self._take_over_one()
        return super().send(email)

    def _take_over_one(self) -> None:
        if not self.taken_over:
            # w2 sees a clock past w1's lease; w1's own clock stays where it is.
            later = self.clock.now() + self.ctx.delivery_policy.lease + timedelta(seconds=1)
            with self.engine.begin() as connection:
                self.taken_over = claim_due(connection, owner="w2", limit=1, now=later, policy=self.ctx.delivery_policy)


def test_a_message_taken_over_mid_batch_is_left_out_and_the_rest_of_the_batch_is_recorded(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    queue(ctx, 3)
    batch = claim(ctx, engine, "w1", clock)
    mailer = TakenOverWhileSending(ctx, engine, clock)

    states = deliver_batch(ctx, batch, mailer, owner="w1", sender=SENDER)

    [taken_over] = [str(c.row.message_id) for c in mailer.taken_over]
    by_message = {str(c.row.message_id): state for c, state in zip(batch, states, strict=True)}
    assert by_message.pop(taken_over) == "lease_lost"
    assert list(by_message.values()) == ["sent", "sent"]
    assert email_event_types(engine, taken_over)[-2:] == ["LeaseExpired", "LeaseClaimed"]
    assert [email_event_types(engine, m)[-1] for m in by_message] == ["ProviderAccepted"] * 2
    assert_projections_match_log(engine)
