"""Re-drive: send abandoned or failed messages again, on an operator's word and with their reason.

A re-drive appends ``DeliveryRedriven`` (who, why, when) on each message's
stream; the outbox fold puts the message back to ``pending``, due at once.
Nothing else changes for the worker: it claims the message like any other and
reads the request fresh before sending, so a message whose link or code
expired meanwhile is skipped as "expired", never sent.

The preview and the act share one plan: the preview reads and locks the same
rows and takes the same decisions, then rolls back. Acting appends every
event in one statement: all of them, or none. (A worker never claims an
abandoned or failed row, so the locks keep nobody waiting.)
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

from attrs import frozen
from sqlalchemy import Connection, text

from domain.delivery import redrive_events, redrive_reason
from domain.tenants import tenant_of
from infra.projector.inline import OUTBOX
from infra.services.unit_of_work import ServiceContext, append_and_fold, outbox_stream
from projections.outbox import OutboxRow

# Locked in the preview too, so that it reads exactly what acting would: the
# rows are abandoned or failed ones, which no worker touches.
ONE = text("SELECT * FROM email_outbox WHERE message_id = :message_id FOR UPDATE")
ABANDONED = text("""
    SELECT * FROM email_outbox
     WHERE state = 'abandoned' AND finished_at >= coalesce(CAST(:since AS timestamptz), '-infinity')
     ORDER BY finished_at, message_id
       FOR UPDATE
""")


@frozen
class Selection:
    """Which messages to re-drive: one by id, or every abandoned one (since a time, if given).

    With ``tenant``, only that tenant's messages: another tenant's message is
    not found (an admin key acts for its own tenant only).
    """

    message_id: UUID | None = None
    abandoned_since: datetime | None = None
    tenant: str | None = None

    def rows(self, connection: Connection) -> tuple[OutboxRow, ...]:
        """The selected outbox rows, locked until the transaction ends."""
        if self.message_id is not None:
            found = connection.execute(ONE, {"message_id": self.message_id})
        else:
            found = connection.execute(ABANDONED, {"since": self.abandoned_since})
        rows = (OutboxRow(**row._mapping) for row in found)
        return tuple(row for row in rows if self.tenant is None or tenant_of(row.user_id) == self.tenant)


@frozen
class Plan:
    """The messages a re-drive would send again, as they stand now, and the events it appends."""

    rows: tuple[OutboxRow, ...]
    events: tuple[object, ...]


def _plan(connection: Connection, selection: Selection, *, reason: str, actor: str, now: datetime) -> Plan:
    reason = redrive_reason(reason)
    rows = selection.rows(connection)
    if selection.message_id is not None and not rows:
        redrive_events(selection.message_id, None, actor=actor, reason=reason, now=now)  # raises NotFound
    events = tuple(
        event for row in rows
        for event in redrive_events(row.message_id, row.state, actor=actor, reason=reason, now=now)
    )
    return Plan(rows, events)


def _actor(metadata: Mapping[str, Any] | None) -> str:
    return str((metadata or {}).get("actor") or "unknown")


def redrive_preview(
    ctx: ServiceContext, selection: Selection, *, reason: str, metadata: Mapping[str, Any] | None = None
) -> Plan:
    """What ``redrive`` would do now, with the same errors; nothing is written."""
    with ctx.engine.connect() as connection:
        return _plan(connection, selection, reason=reason, actor=_actor(metadata), now=ctx.clock.now())


def redrive(
    ctx: ServiceContext, selection: Selection, *, reason: str, metadata: Mapping[str, Any] | None = None
) -> Plan:
    """Re-drive the selected messages in one transaction; the plan carried out."""
    with ctx.engine.begin() as connection:
        plan = _plan(connection, selection, reason=reason, actor=_actor(metadata), now=ctx.clock.now())
        if plan.events:
            batches = [(outbox_stream(row), row.stream_version, [event])
                       for row, event in zip(plan.rows, plan.events, strict=True)]
            append_and_fold(connection, batches, metadata,
                            loaded={OUTBOX.name: {row.message_id: row for row in plan.rows}})
    return plan
