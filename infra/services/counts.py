"""Counting floods: the ``request_counts`` buffer behind ``domain.counting.RequestsCounted``.

A call the domain counts (``Decision.counted``) bumps its stream's row in
the transaction that answers it; the stream's next append first empties the
rows into ``RequestsCounted`` events, and so does ``serve`` for the rows of a
window that has closed (``infra.services.closed_counts``), so the log ends up
holding every count. Once a window has reached its ceiling of events from
floods (``domain.counting.counts_fit``) its rows wait for it to close. The rows
are a buffer of the log, not a projection of it: they hold what no event holds
yet, and no rebuild could bring them back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, text

from domain.counting import RequestsCounted
from domain.limits import window_of
from domain.decisions import Counted
from infra.db.pipeline import execute_deferred

MAX_CLIENTS = 20  # distinct clients named per count; a flood from more is still counted in full

COUNT = text(f"""
    INSERT INTO request_counts AS c (stream_id, answer, flow, user_id, window_start, first_at, last_at, count, clients)
    VALUES (:stream_id, :answer, :flow, :user_id, :window_start, :at, :at, 1, jsonb_build_array(CAST(:client AS text)))
    ON CONFLICT (stream_id, answer) DO UPDATE
       SET last_at = greatest(c.last_at, EXCLUDED.last_at), count = c.count + 1,
           clients = CASE WHEN c.clients @> EXCLUDED.clients OR jsonb_array_length(c.clients) >= {MAX_CLIENTS}
                          THEN c.clients ELSE c.clients || EXCLUDED.clients END
""")

CLEAR = text("DELETE FROM request_counts WHERE stream_id = :stream_id")
CLEAR_CLOSED = text("DELETE FROM request_counts WHERE stream_id = :stream_id AND window_start < :window")


def count_call(connection: Connection, stream_id: str, counted: Counted) -> None:
    """Add one call to its stream's count, in the caller's transaction (sent with its COMMIT)."""
    execute_deferred(connection, COUNT, {
        "stream_id": stream_id, "answer": counted.answer, "flow": counted.flow, "user_id": counted.user_id,
        "window_start": window_of(counted.at), "at": counted.at, "client": counted.client,
    })


def take_counts(
    connection: Connection, stream_id: str, rows: Sequence[Mapping[str, Any]], *, closed_by: datetime | None = None,
) -> list[RequestsCounted]:
    """Empty the stream's counts into the events that record them, oldest first.

    ``rows`` are its ``request_counts`` rows as JSON objects, read with the
    stream under its lock (``infra.projector.snapshots.StreamRead``): the
    caller holds the lock, so they are all there is to empty. With
    ``closed_by`` (a moment), only the rows of windows that had closed by
    then. The DELETE travels with the append.
    """
    if closed_by is None:
        execute_deferred(connection, CLEAR, {"stream_id": stream_id})
    else:
        rows = [row for row in rows if _utc(row["window_start"]) < window_of(closed_by)]
        if rows:
            execute_deferred(connection, CLEAR_CLOSED, {"stream_id": stream_id, "window": window_of(closed_by)})
    return counted_events(rows)


def counted_events(rows: Sequence[Mapping[str, Any]]) -> list[RequestsCounted]:
    """The events that record ``request_counts`` rows (as ``take_counts`` reads them), oldest first; no write."""
    counted = [RequestsCounted(row["flow"], row["user_id"], row["answer"], _utc(row["window_start"]),
                               _utc(row["first_at"]), _utc(row["last_at"]), row["count"], tuple(row["clients"]))
               for row in rows]
    return sorted(counted, key=lambda event: event.first_at)


def _utc(timestamp: str) -> datetime:
    return datetime.fromisoformat(timestamp).astimezone(UTC)
