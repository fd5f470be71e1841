"""Counts over the outbox for operators: what is queued, due, stuck or done."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, text

from domain.outage import ProviderOutageBegan
from domain.tenants import DEFAULT_TENANT, SEPARATOR
from infra.config.settings import PROVIDERS
from infra.eventlog.outages import open_outages
from projections.findings import outage_going_on
from projections.outbox import STATES

# Only the messages of one tenant when :tenant is given (/metrics for a
# tenant's key): a scoped user id names its tenant (domain.tenants), the
# default tenant's holding no separator.
OF_TENANT = """
    (CAST(:tenant AS text) IS NULL
     OR CASE WHEN CAST(:tenant AS text) = :default_tenant THEN strpos(user_id, :separator) = 0
             ELSE starts_with(user_id, CAST(:tenant AS text) || :separator) END)
"""
BY_STATE = text(f"SELECT state, count(*) AS n FROM email_outbox WHERE {OF_TENANT} GROUP BY state")
DUE = text(f"""
    SELECT count(*) AS n FROM email_outbox
     WHERE state IN ('pending', 'leased') AND available_at <= :now AND {OF_TENANT}
""")
OLDEST_DUE = text(f"""
    SELECT message_id, available_at, queued_at FROM email_outbox
     WHERE state IN ('pending', 'leased') AND available_at <= :now AND {OF_TENANT}
     ORDER BY available_at LIMIT 1
""")


def _seconds(since: datetime, now: datetime) -> float:
    return round(max((now - since).total_seconds(), 0.0), 1)


def outbox_status(engine: Engine, *, now: datetime, tenant: str | None = None) -> dict[str, Any]:
    """Messages by state, how many are due now, and the oldest due one: how long it has been due and queued.

    Of every tenant, or of ``tenant`` only. ``oldest_due_seconds`` and
    ``oldest_due_queued_seconds`` are None when nothing is due.
    """
    scope = {"tenant": tenant, "default_tenant": DEFAULT_TENANT, "separator": SEPARATOR}
    with engine.connect() as connection:
        counts = {row.state: row.n for row in connection.execute(BY_STATE, scope)}
        due = connection.execute(DUE, {"now": now, **scope}).scalar_one()
        oldest = connection.execute(OLDEST_DUE, {"now": now, **scope}).first()
    return {
        "by_state": {state: counts.get(state, 0) for state in STATES},
        "due_now": due,
        "oldest_due_message_id": str(oldest.message_id) if oldest else None,
        "oldest_due_seconds": _seconds(oldest.available_at, now) if oldest else None,
        "oldest_due_queued_seconds": _seconds(oldest.queued_at, now) if oldest else None,
    }


# What an operator looks at when mail is late, one query per kind, oldest first:
# - retrying: failed at least once and waiting for its next attempt;
# - expired_lease: a worker's lease ran out (for longer than the threshold)
#   and no worker has reclaimed it;
# - unclaimed: due (for longer than the threshold) and never claimed;
# - abandoned / failed / unknown: given up, newest first: the ones `outbox retry` can send again.
RETRYING = text("""
    SELECT * FROM email_outbox
     WHERE state = 'pending' AND attempt_count > 0 AND last_error IS NOT NULL
     ORDER BY available_at LIMIT :limit
""")
EXPIRED_LEASES = text("""
    SELECT * FROM email_outbox
     WHERE state = 'leased' AND lease_expires_at <= :cutoff
     ORDER BY lease_expires_at LIMIT :limit
""")
UNCLAIMED = text("""
    SELECT * FROM email_outbox
     WHERE state = 'pending' AND attempt_count = 0 AND available_at <= :cutoff
     ORDER BY available_at LIMIT :limit
""")
GIVEN_UP = text("""
    SELECT * FROM email_outbox
     WHERE state IN ('abandoned', 'failed', 'unknown')
     ORDER BY finished_at DESC LIMIT :limit
""")
KINDS = ("retrying", "expired_lease", "unclaimed", "given_up")


def stuck_reason(kind: str, row: Any, now: datetime, outages: Sequence[ProviderOutageBegan]) -> str:
    """Why a message that should have gone out has not, in words an operator can act on.

    While a provider's outage is recorded as going on, mail waiting to be
    sent waits for the provider, not for a worker: the reason says so.
    """
    if outages and kind in ("retrying", "expired_lease", "unclaimed"):
        return "; ".join(outage_going_on(outage) for outage in outages)
    if kind == "retrying":
        return (f"retry due at {row.available_at.isoformat()} after {row.attempt_count} failed attempt(s), "
                f"last error: {row.last_error}")
    if kind == "expired_lease":
        return (f"lease of {row.lease_owner} ran out {_seconds(row.lease_expires_at, now)} s ago and no worker has "
                "reclaimed it: are workers running?")
    if kind == "unclaimed":
        return "queued and due, but no worker has claimed it: are workers running?"
    again = f"`authledger outbox retry --message-id {row.message_id}` sends it again"
    if row.state == "unknown":
        return (f"not sent again at {row.finished_at.isoformat()}: {row.unknown_outcomes} attempts went unanswered "
                f"(last error: {row.last_error}) and the provider cannot drop a repeat, so it may have arrived; "
                f"if the user never got it, {again}")
    return f"{row.state} at {row.finished_at.isoformat()}, last error: {row.last_error}; {again}"


def _describe(kind: str, row: Any, now: datetime, outages: Sequence[ProviderOutageBegan]) -> dict[str, Any]:
    described = {
        "kind": kind, "message_id": str(row.message_id), "flow": row.flow, "template": row.template,
        "state": row.state, "attempts": row.attempt_count, "last_error": row.last_error,
        "reason": stuck_reason(kind, row, now, outages),
    }
    if kind == "retrying":
        described["next_attempt_at"] = row.available_at.isoformat()
    elif kind == "expired_lease":
        described |= {"lease_owner": row.lease_owner, "lease_expired_at": row.lease_expires_at.isoformat(),
                      "expired_seconds": _seconds(row.lease_expires_at, now)}
    elif kind == "unclaimed":
        described |= {"due_since": row.available_at.isoformat(), "overdue_seconds": _seconds(row.available_at, now)}
    else:
        described["finished_at"] = row.finished_at.isoformat()
    return described


def _rows(connection: Connection, kind: str, cutoff: datetime, limit: int) -> list[Any]:
    query = {"retrying": RETRYING, "expired_lease": EXPIRED_LEASES, "unclaimed": UNCLAIMED, "given_up": GIVEN_UP}
    return list(connection.execute(query[kind], {"cutoff": cutoff, "limit": limit}))


def stuck_messages(
    engine: Engine, *, now: datetime, older_than_seconds: float, limit: int = 100
) -> list[dict[str, Any]]:
    """Messages not delivered that an operator may need to act on, up to ``limit`` of each kind.

    Messages waiting for a retry and given-up ones are listed whatever their
    age; leases that ran out and never-claimed messages only once they are
    ``older_than_seconds`` overdue (a busy worker reclaims them sooner).
    """
    cutoff = now - timedelta(seconds=older_than_seconds)
    with engine.connect() as connection:
        outages = open_outages(connection, PROVIDERS)
        return [_describe(kind, row, now, outages) for kind in KINDS for row in _rows(connection, kind, cutoff, limit)]
