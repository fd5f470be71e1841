"""The outbox page's data: 24 hours of counts by hour and state, and the lists that need an operator.

The counts come from ``delivery_messages`` (the catch-up projection behind
``outbox stats``): queued per hour by ``queued_at``, and per hour and
outcome by ``finished_at``. Both are range scans of their own index
(``delivery_messages_by_queued``, ``delivery_messages_by_finished``), so
the cost follows the last day's mail, not the size of the log. Being a
catch-up projection, it trails the log by the runner's lag (seconds).

The lists are ``outbox stuck``'s, grouped the way the page shows them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, text

from infra.delivery.status import stuck_messages
from projections.outbox_chart import CHART_STATES, HourCounts

HOURS = 24
# :origin aligns the bins on the hour; [since, until) is the 24 hours shown.
QUEUED_BY_HOUR = text("""
    SELECT date_bin('1 hour', queued_at, :origin) AS hour, 'queued' AS state, count(*) AS n
      FROM delivery_messages
     WHERE queued_at >= :since AND queued_at < :until
     GROUP BY 1
""")
FINISHED_BY_HOUR = text("""
    SELECT date_bin('1 hour', finished_at, :origin) AS hour, outcome AS state, count(*) AS n
      FROM delivery_messages
     WHERE finished_at >= :since AND finished_at < :until
     GROUP BY 1, 2
""")
QUERIES = {"queued_by_hour": QUEUED_BY_HOUR, "finished_by_hour": FINISHED_BY_HOUR}


def last_24_hours(now: datetime) -> tuple[datetime, datetime]:
    """[since, until): the 24 whole hours ending with the one ``now`` falls in."""
    until = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    return until - timedelta(hours=HOURS), until


def hourly_counts(engine: Engine, *, now: datetime) -> list[HourCounts]:
    """24 buckets, oldest first, each with the messages queued and finished (by outcome) in that hour."""
    since, until = last_24_hours(now)
    params = {"origin": since, "since": since, "until": until}
    counts: dict[datetime, dict[str, int]] = {since + timedelta(hours=h): {} for h in range(HOURS)}
    with engine.connect() as connection:
        for query in QUERIES.values():
            for row in connection.execute(query, params):
                counts[row.hour][row.state] = row.n
    return [HourCounts(start, {state: by_state.get(state, 0) for state in CHART_STATES})
            for start, by_state in counts.items()]


LIST_OF_KIND = {"retrying": "retrying", "expired_lease": "stuck", "unclaimed": "stuck"}


def attention_lists(
    engine: Engine, *, now: datetime, older_than_seconds: float = 60.0, limit: int = 100,
) -> dict[str, list[dict[str, Any]]]:
    """What needs an operator, as ``outbox stuck`` finds it: waiting for a retry, stuck, failed, abandoned.

    Each entry is ``outbox stuck --json``'s, with its ``last_error`` and the
    reason in words. "stuck" holds leases that ran out and due mail nobody
    claimed, once ``older_than_seconds`` overdue.
    """
    lists: dict[str, list[dict[str, Any]]] = {"retrying": [], "stuck": [], "failed": [], "abandoned": [],
                                              "unknown": []}
    for message in stuck_messages(engine, now=now, older_than_seconds=older_than_seconds, limit=limit):
        lists[LIST_OF_KIND.get(message["kind"], message["state"])].append(message)
    return lists
