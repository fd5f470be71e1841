"""Counts over the outbox for operators: what is queued, due, stuck or done."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Engine, text

from infra.database import database_errors
from projections.outbox import STATES

BY_STATE = text("SELECT state, count(*) AS n FROM email_outbox GROUP BY state")
DUE = text("""
    SELECT count(*) AS n, min(available_at) AS oldest FROM email_outbox
     WHERE state IN ('pending', 'leased') AND available_at <= :now
""")


def outbox_status(engine: Engine, *, now: datetime) -> dict[str, Any]:
    with database_errors(), engine.connect() as connection:
        counts = {row.state: row.n for row in connection.execute(BY_STATE)}
        due = connection.execute(DUE, {"now": now}).one()
    oldest = round((now - due.oldest).total_seconds(), 1) if due.oldest else None
    return {
        "by_state": {state: counts.get(state, 0) for state in STATES},
        "due_now": due.n,
        "oldest_due_seconds": oldest,
    }
