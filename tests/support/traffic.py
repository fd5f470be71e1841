"""Building logs for projection tests: a bit of everything through the services, or many emails at once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

from attrs import evolve
from sqlalchemy import Connection

from domain.email import EmailQueued, LeaseClaimed, ProviderAccepted
from domain.policy import ResetPolicy
from domain.reset import RequestReset
from infra.clock import ManualClock
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext, append_and_fold
from infra.delivery.worker import Worker
from tests.support.mailers import RecordingMailer

SENDER = "authledger <no-reply@app.test>"


def no_cooldown(ctx: ServiceContext) -> ServiceContext:
    return evolve(ctx, reset_policy=ResetPolicy(cooldown=timedelta(0)))


def some_traffic(ctx: ServiceContext, clock: ManualClock, users: int = 10) -> RecordingMailer:
    """Two requests per user (the first superseded), one failed send retried, everything delivered."""
    ctx, mailer = no_cooldown(ctx), RecordingMailer()
    for n in range(users):
        request_reset(ctx, RequestReset(f"user-{n}", f"u{n}@example.test"))
    clock.advance(2)
    mailer.fail_next = 1
    Worker(ctx, mailer, sender=SENDER).drain()
    for n in range(0, users, 2):
        request_reset(ctx, RequestReset(f"user-{n}", f"u{n}@example.test"))
    clock.advance(ctx.delivery_policy.backoff_base)
    Worker(ctx, mailer, sender=SENDER).drain()
    return mailer


def delivered_emails(connection: Connection, count: int, users: str = "u") -> None:
    """``count`` emails queued, claimed and accepted, appended (and folded inline) in one transaction."""
    now = datetime(2024, 5, 1, 10, tzinfo=UTC)
    batches = []
    for n in range(count):
        message_id, token = uuid4(), uuid4()
        batches.append((f"email:{message_id}", 0, [
            EmailQueued(message_id, "reset", "reset_link", f"{users}{n}", uuid4(), f"{users}{n}@example.test", now),
            LeaseClaimed(message_id, "w1", token, now, now + timedelta(seconds=45), 1),
            ProviderAccepted(message_id, token, 1, now + timedelta(milliseconds=n), "smtp", f"id-{n}", "k2"),
        ]))
    append_and_fold(connection, batches)


def some_feedback(ctx: ServiceContext) -> None:
    """After ``some_traffic``: user-0's email bounces for good, user-1's is complained about, then lifted."""
    from sqlalchemy import text

    from domain.feedback import check_feedback
    from infra.services.feedback import MessageRef, record_feedback
    from infra.services.suppressions import lift

    with ctx.engine.connect() as connection:
        sent = dict(connection.execute(text(
            "SELECT user_id, provider_message_id FROM email_outbox WHERE state = 'sent' ORDER BY finished_at")).all())
    record_feedback(ctx, MessageRef(provider_message_id=sent["user-0"]),
                    check_feedback("bounce", "generic", permanent=True, diagnostic="550 5.1.1 no such user"),
                    tenant="default")
    record_feedback(ctx, MessageRef(provider_message_id=sent["user-1"]), check_feedback("complaint", "generic"),
                    tenant="default")
    lift(ctx, "default", "u1@example.test", actor="cli:ops", reason="T-2")
