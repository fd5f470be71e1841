"""Building a log with a bit of everything: requests, supersessions, retries, sends."""

from __future__ import annotations

from datetime import timedelta

from attrs import evolve

from domain.policy import ResetPolicy
from domain.reset import RequestReset
from infra.clock import ManualClock
from infra.reset_service import request_reset
from infra.services import ServiceContext
from infra.worker import Worker
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
