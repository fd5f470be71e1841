"""Counts over the outbox for operators: what is queued, due, stuck or done."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, text

from projections.outbox import STATES

BY_STATE = text("SELECT state, count(*) AS n FROM email_outbox GROUP BY state")
DUE = text("""
    SELECT count(*) AS n, min(available_at) AS oldest FROM email_outbox
     WHERE state IN ('pending', 'leased') AND available_at <= :now
""")


def outbox_status(engine: Engine, *, now: datetime) -> dict[str, Any]:
    with engine.connect() as connection:
        counts = {row.state: row.n for row in connection.execute(BY_STATE)}
        due = connection.execute(DUE, {"now": now}).one()
    oldest = round((now - due.oldest).total_seconds(), 1) if due.oldest else None
    return {
        "by_state": {state: counts.get(state, 0) for state in STATES},
        "due_now": due.n,
        "oldest_due_seconds": oldest,
    }


STUCK = text("""
    SELECT message_id, flow, template, state, available_at, attempt_count, lease_owner, last_error
      FROM email_outbox
     WHERE state IN ('pending', 'leased') AND available_at <= :cutoff
     ORDER BY available_at
     LIMIT :limit
""")


def stuck_reason(row: Any) -> str:
    """Why a message that should have gone out has not, in words an operator can act on."""
    if row.state == "leased":
        return f"lease of {row.lease_owner} ran out and no worker has reclaimed it: are workers running?"
    if row.attempt_count and row.last_error:
        return f"retry due after {row.attempt_count} failed attempt(s), last error: {row.last_error}"
    return "queued and due, but no worker has claimed it: are workers running?"


def stuck_messages(engine: Engine, *, now: datetime, older_than_seconds: float, limit: int = 100) -> list[dict[str, Any]]:
    """Messages due for longer than ``older_than_seconds`` and still not finished."""
    cutoff = now - timedelta(seconds=older_than_seconds)
    with engine.connect() as connection:
        rows = connection.execute(STUCK, {"cutoff": cutoff, "limit": limit}).all()
    return [
        {
            "message_id": str(row.message_id), "flow": row.flow, "template": row.template, "state": row.state,
            "due_since": row.available_at.isoformat(), "overdue_seconds": round((now - row.available_at).total_seconds(), 1),
            "attempts": row.attempt_count, "reason": stuck_reason(row),
        }
        for row in rows
    ]
