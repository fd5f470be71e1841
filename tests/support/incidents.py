"""The three cases of docs/incident-review.md, built the same way by the tests and for the document.

Each builds a small, realistic history on a fresh database, on a clock that
starts at 2024-05-01 10:00:00 UTC, with readable sequential ids, and returns
the ids a reviewer would be handed.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from uuid import UUID

from attrs import evolve
from sqlalchemy import Engine

from domain.reset import RequestReset
from infra.clock import ManualClock
from infra.delivery.fresh import prepare
from infra.delivery.pipeline import deliver
from infra.delivery.leases import claim_due
from infra.delivery.providers import OutboundEmail, ProviderReceipt
from infra.services.reset import consume_token, request_reset
from infra.services.unit_of_work import ServiceContext
from tests.support.mailers import RecordingMailer

START = datetime(2024, 5, 1, 10, 0, 0, tzinfo=UTC)
SENDER = "authledger <no-reply@app.test>"
WEB = {"actor": "client:acme-web", "client": "acme-web"}


class SmtpMailer(RecordingMailer):
    """Records like ``RecordingMailer``; answers like an SMTP relay that ignores idempotency keys."""

    name = "smtp"
    idempotent = False

    def send(self, email: OutboundEmail) -> ProviderReceipt:
        super().send(email)
        return ProviderReceipt(self.name, f"<{email.message_id}@relay.example>")


def sequential_ids(first: int) -> Callable[[], UUID]:
    counter = itertools.count(first)
    return lambda: UUID(f"00000000-0000-4000-8000-{next(counter):012x}")


def incident_context(ctx: ServiceContext, first_id: int) -> tuple[ServiceContext, ManualClock]:
    clock = ManualClock(START)
    return evolve(ctx, clock=clock, new_id=sequential_ids(first_id)), clock


def at(clock: ManualClock, hh_mm_ss: str) -> None:
    """Move the clock forward to this time of the incident's day."""
    h, m, s = (int(part) for part in hh_mm_ss.split(":"))
    clock.advance(START.replace(hour=h, minute=m, second=s) - clock.now())


def deliver_due(ctx: ServiceContext, mailer: RecordingMailer, owner: str) -> list[str]:
    """What a worker does, with the retry jitter fixed so that the story is the same every time."""
    with ctx.engine.begin() as connection:
        claims = claim_due(connection, owner=owner, limit=10, now=ctx.clock.now(), policy=ctx.delivery_policy)
    return [deliver(ctx, claim, mailer, owner=owner, sender=SENDER, jitter=lambda: 0.5) for claim in claims]


def token_in(email: OutboundEmail) -> str:
    line = next(line for line in email.text_body.splitlines() if "token=" in line)
    return line.split("token=")[1].strip()


def duplicate_emails(ctx: ServiceContext, engine: Engine) -> dict[str, UUID]:
    """"I got three reset emails": asked twice, and a worker crashed while sending the second."""
    ctx, clock = incident_context(ctx, 0xA00)
    mailer = SmtpMailer()
    first = request_reset(ctx, RequestReset("42", "ada@example.test"), WEB)
    at(clock, "10:00:01")
    deliver_due(ctx, mailer, "w1")
    at(clock, "10:02:11")
    second = request_reset(ctx, RequestReset("42", "ada@example.test"), WEB)
    at(clock, "10:02:12")
    with engine.begin() as connection:
        [claim] = claim_due(connection, owner="w1", limit=1, now=clock.now(), policy=ctx.delivery_policy)
    mailer.send(prepare(ctx, claim, sender=SENDER).email)  # w1 hands it to the relay, then dies
    at(clock, "10:03:00")
    deliver_due(ctx, mailer, "w2")
    return {"first_request": first.request_id, "first_message": first.message_id,
            "second_request": second.request_id, "second_message": second.message_id}


def missing_email(ctx: ServiceContext, engine: Engine) -> dict[str, UUID]:
    """"I never got the email": the provider refused every attempt until the worker gave up.

    The deployment sets the optional hard cap, AUTHLEDGER_MAX_ATTEMPTS=5;
    without it the worker would retry until the link expired.
    """
    ctx, clock = incident_context(ctx, 0xB00)
    ctx = evolve(ctx, delivery_policy=evolve(ctx.delivery_policy, max_attempts=5))
    mailer = SmtpMailer()
    mailer.fail_next = 99
    request = request_reset(ctx, RequestReset("7", "bo@example.test"), WEB)
    for minute in range(1, 6):
        at(clock, f"10:0{minute}:00")
        deliver_due(ctx, mailer, "w1")
    return {"request": request.request_id, "message": request.message_id}


def stale_link(ctx: ServiceContext, engine: Engine) -> dict[str, UUID]:
    """"The link in my email does not work": it was replaced by a newer request's link."""
    ctx, clock = incident_context(ctx, 0xC00)
    mailer = SmtpMailer()
    old = request_reset(ctx, RequestReset("9", "cy@example.test"), WEB)
    at(clock, "10:00:02")
    deliver_due(ctx, mailer, "w1")
    at(clock, "10:05:00")
    new = request_reset(ctx, RequestReset("9", "cy@example.test"), WEB)
    at(clock, "10:05:01")
    deliver_due(ctx, mailer, "w1")
    at(clock, "10:08:00")
    consume_token(ctx, token_in(mailer.emails[-1]), WEB)
    at(clock, "10:08:01")
    deliver_due(ctx, mailer, "w1")
    return {"old_request": old.request_id, "old_message": old.message_id, "new_request": new.request_id}


def later(clock_start: datetime = START) -> datetime:
    """When the review happens: the next day."""
    return clock_start + timedelta(days=1)
