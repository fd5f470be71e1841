"""`authledger outbox`: seeing what email waits, what is stuck, and how delivery went."""

from __future__ import annotations

from datetime import timedelta

import click

from commands.output import emit, json_option
from infra.bootstrap import App
from infra.delivery.report import as_rows as as_report_rows
from infra.delivery.report import delivery_report, render_report, report_as_of
from infra.delivery.status import outbox_status, stuck_messages


@click.group()
def outbox() -> None:
    """Inspect outbound email."""


@outbox.command("status")
@json_option
@click.pass_obj
def outbox_status_command(app: App, as_json: bool) -> None:
    """Messages by state, and the oldest due one."""
    status = outbox_status(app.engine, now=app.clock.now())
    lines = [f"{state:<10} {count}" for state, count in status["by_state"].items()]
    lines.append(f"due now    {status['due_now']} (oldest due {status['oldest_due_seconds']} s ago)")
    emit(status, as_json, "\n".join(lines))


@outbox.command("stuck")
@click.option("--older-than", default=60.0, show_default=True, type=click.FloatRange(0), help="Seconds overdue.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 10_000))
@json_option
@click.pass_obj
def outbox_stuck(app: App, older_than: float, limit: int, as_json: bool) -> None:
    """Messages past their due time, with the likely reason."""
    stuck = stuck_messages(app.engine, now=app.clock.now(), older_than_seconds=older_than, limit=limit)
    lines = [f"{m['message_id']}  {m['state']:<8} overdue {m['overdue_seconds']:>8} s  {m['reason']}" for m in stuck]
    emit(stuck, as_json, "\n".join(lines) or "nothing stuck")


@outbox.command("stats")
@click.option("--days", default=7, show_default=True, type=click.IntRange(1, 3660), help="Days back, today included.")
@json_option
@click.pass_obj
def outbox_stats(app: App, days: int, as_json: bool) -> None:
    """Delivery per day (UTC), flow and outcome: messages, attempts, time from queued to accepted."""
    until = app.clock.now().date()
    report = delivery_report(app.engine, since=until - timedelta(days=days - 1), until=until)
    emit({"as_of": report_as_of(app.engine), "days": as_report_rows(report)}, as_json,
         render_report(report) if report else "no messages in that period (is `projections run` running?)")
