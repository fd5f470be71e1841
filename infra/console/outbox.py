"""What the console's outbox page shows a tenant, and whose a message is before anyone re-drives it.

The chart counts every tenant's mail (``delivery_messages`` keeps no user: it
is the operator's picture of the service's sending, and it names nobody). The
lists name messages, so each keeps only the caller's tenant's, and a re-drive
is refused for a message of another tenant exactly as for one that never
existed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from attrs import frozen
from sqlalchemy import Engine, text

from domain.tenants import tenant_of
from infra.db.replica import ReplicaLag, replica_lag_of
from infra.delivery.overview import attention_lists, hourly_counts
from projections.outbox_chart import render_outbox_chart

OWNERS = text("SELECT message_id, user_id FROM email_outbox WHERE message_id = ANY(CAST(:ids AS uuid[]))")
OWNER = text("SELECT user_id FROM email_outbox WHERE message_id = :message_id")
LISTS = (("retrying", "Waiting for a retry"), ("stuck", "Stuck"), ("failed", "Failed"), ("abandoned", "Abandoned"))


@frozen
class OutboxView:
    chart: str  # the SVG
    lists: dict[str, list[dict[str, Any]]]  # as attention_lists gives them, only the tenant's messages
    replica: ReplicaLag | None = None  # read from the read replica, at least this far behind; None: the primary


def outbox_view(engine: Engine, tenant: str, *, now: datetime) -> OutboxView:
    """The 24 h chart and the lists that need an operator, the lists cut to ``tenant``'s messages."""
    replica = replica_lag_of(engine)  # before the reads it describes, so that none of them is older than it says
    chart = render_outbox_chart(hourly_counts(engine, now=now))
    lists = attention_lists(engine, now=now)
    ids = [message["message_id"] for found in lists.values() for message in found]
    with engine.connect() as connection:
        owners = {str(row.message_id): row.user_id for row in connection.execute(OWNERS, {"ids": ids})} if ids else {}
    return OutboxView(chart, {name: [m for m in found if tenant_of(owners.get(m["message_id"], "")) == tenant
                                     and m["message_id"] in owners]
                              for name, found in lists.items()}, replica)


def message_of_tenant(engine: Engine, tenant: str, message_id: UUID) -> bool:
    """Whether ``message_id`` is in the outbox and belongs to a user of ``tenant``."""
    with engine.connect() as connection:
        owner = connection.execute(OWNER, {"message_id": message_id}).scalar_one_or_none()
    return owner is not None and tenant_of(owner) == tenant
