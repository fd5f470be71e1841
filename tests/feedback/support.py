"""What the feedback tests share: a reset whose email the provider accepted, and what explain then says."""

from __future__ import annotations

from uuid import UUID

from domain.reset import RequestReset
from infra.delivery.worker import Worker
from infra.review.history import explain
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.support.mailers import RecordingMailer

SENDER = "authledger <no-reply@app.test>"


def sent_reset(ctx: ServiceContext, user_id: str, address: str, *, tenant: str = "default") -> UUID:
    """The message id of a reset email to ``address`` that a worker handed to the provider (id "rec-<id>")."""
    outcome = request_reset(ctx, RequestReset(user_id, address, tenant=tenant))
    Worker(ctx, RecordingMailer(), sender=SENDER).drain()
    return outcome.message_id


def explained(ctx: ServiceContext, message_id: UUID, *, tenant: str = "default") -> list[str]:
    return [f.sentence for f in explain(ctx.engine, message_id=message_id, tenant=tenant,
                                        now=ctx.clock.now()).findings]
