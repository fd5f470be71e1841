"""The delivery report: per day, flow and outcome, counts, attempts and time from queued to accepted.

Computed from ``delivery_messages`` (the ``delivery_stats`` catch-up
projection) with ``percentile_disc``, which picks actual values, so the
report equals ``projections.delivery_stats.summarise`` over a replay of the
log, exactly.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from sqlalchemy import Engine, text

from infra.projector.catchup import read_checkpoint
from projections.delivery_stats import DeliverySummary

REPORT = text("""
    SELECT day, flow, outcome, count(*) AS messages, sum(attempts) AS attempts,
           percentile_disc(0.5) WITHIN GROUP (ORDER BY time_to_accept) AS p50,
           percentile_disc(0.95) WITHIN GROUP (ORDER BY time_to_accept) AS p95,
           max(time_to_accept) AS max
      FROM delivery_messages
     WHERE day >= :since AND day <= :until
     GROUP BY day, flow, outcome
     ORDER BY day, flow COLLATE "C", outcome COLLATE "C"
""")


def delivery_report(engine: Engine, *, since: date, until: date) -> list[DeliverySummary]:
    with engine.connect() as connection:
        rows = connection.execute(REPORT, {"since": since, "until": until}).all()
    return [DeliverySummary(r.day, r.flow, r.outcome, r.messages, int(r.attempts), r.p50, r.p95, r.max)
            for r in rows]


def report_as_of(engine: Engine) -> dict[str, Any]:
    """How far the report reaches: the projection's checkpoint."""
    with engine.connect() as connection:
        stored = read_checkpoint(connection, "delivery_stats")
    return {"global_position": stored.checkpoint.global_position, "events_applied": stored.events_applied,
            "updated_at": stored.updated_at.isoformat() if stored.updated_at else None}


def _seconds(value: timedelta | None) -> float | None:
    return round(value.total_seconds(), 3) if value is not None else None


def as_rows(report: list[DeliverySummary]) -> list[dict[str, Any]]:
    return [{"day": r.day.isoformat(), "flow": r.flow, "outcome": r.outcome, "messages": r.messages,
             "attempts": r.attempts, "p50_seconds": _seconds(r.p50), "p95_seconds": _seconds(r.p95),
             "max_seconds": _seconds(r.max)} for r in report]


def render_report(report: list[DeliverySummary]) -> str:
    header = ("day", "flow", "outcome", "messages", "attempts", "p50 s", "p95 s", "max s")
    rows = [header] + [(r["day"], r["flow"], r["outcome"], str(r["messages"]), str(r["attempts"]),
                        *(f"{r[k]:.3f}" if r[k] is not None else "-" for k in ("p50_seconds", "p95_seconds",
                                                                               "max_seconds")))
                       for r in as_rows(report)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)
