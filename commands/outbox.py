"""`authledger outbox`: seeing what email waits, what is stuck, and how delivery went."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import click

from commands.output import cli_metadata, emit, json_option, parse_instant
from infra.bootstrap import App
from infra.delivery.redrive import Plan, Selection, redrive, redrive_preview
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
    if status["due_now"]:
        lines.append(f"due now    {status['due_now']} (the oldest, {status['oldest_due_message_id']}, was queued "
                     f"{_duration(status['oldest_due_queued_seconds'])} ago and has been due for "
                     f"{_duration(status['oldest_due_seconds'])})")
    else:
        lines.append("due now    0 (nothing is waiting for a worker)")
    emit(status, as_json, "\n".join(lines))


def _duration(seconds: float) -> str:
    """12.5 s, 3 min 20 s, 2 h 5 min: an age a person reads at a glance."""
    if seconds < 60:
        return f"{seconds:g} s"
    minutes, second = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {second} s"
    return f"{minutes // 60} h {minutes % 60} min"


STUCK_HEADINGS = {
    "retrying": "Waiting for a retry",
    "expired_lease": "Leases held past their expiry",
    "unclaimed": "Due, never claimed",
    "given_up": "Abandoned, failed or outcome unknown (`outbox retry` sends them again)",
}


@outbox.command("stuck")
@click.option("--older-than", default=60.0, show_default=True, type=click.FloatRange(0),
              help="Seconds overdue before an expired lease or an unclaimed message counts.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 10_000),
              help="At most this many of each kind.")
@json_option
@click.pass_obj
def outbox_stuck(app: App, older_than: float, limit: int, as_json: bool) -> None:
    """Messages not delivered yet or given up, by kind, with the likely reason."""
    stuck = stuck_messages(app.engine, now=app.clock.now(), older_than_seconds=older_than, limit=limit)
    sections = []
    for kind, heading in STUCK_HEADINGS.items():
        of_kind = [m for m in stuck if m["kind"] == kind]
        if of_kind:
            sections.append("\n".join([f"{heading} ({len(of_kind)}):",
                                        *(f"  {m['message_id']}  {m['reason']}" for m in of_kind)]))
    emit(stuck, as_json, "\n\n".join(sections) or "nothing stuck")


@outbox.command("retry")
@click.option("--message-id", type=click.UUID, help="Re-drive this abandoned, failed or unknown message.")
@click.option("--abandoned", is_flag=True, help="Re-drive every abandoned message.")
@click.option("--since", callback=parse_instant, help="With --abandoned: only those abandoned since then (ISO 8601).")
@click.option("--reason", required=True, help="Why, recorded with your name in the log.")
@click.option("--yes", is_flag=True, help="Do it; without --yes, only show what would be done.")
@json_option
@click.pass_obj
def outbox_retry(app: App, message_id: UUID | None, abandoned: bool, since: datetime | None, reason: str,
                 yes: bool, as_json: bool) -> None:
    """Send abandoned or failed messages again (re-drive); a wanted-check still runs before each send."""
    if (message_id is None) == (not abandoned) or (since is not None and not abandoned):
        raise click.UsageError("give either --message-id M, or --abandoned [--since T]")
    selection = Selection(message_id=message_id, abandoned_since=since)
    act = redrive if yes else redrive_preview
    plan = act(app.services, selection, reason=reason, metadata=cli_metadata("outbox retry"))
    emit({"acted": yes, "messages": _planned(plan)}, as_json, _plan_text(plan, acted=yes))


def _planned(plan: Plan) -> list[dict[str, Any]]:
    return [
        {"message_id": str(row.message_id), "flow": row.flow, "template": row.template, "state": row.state,
         "attempts": row.attempt_count, "last_error": row.last_error,
         "finished_at": row.finished_at.isoformat() if row.finished_at else None}
        for row in plan.rows
    ]


def _plan_text(plan: Plan, *, acted: bool) -> str:
    if not plan.rows:
        return "no abandoned message to re-drive"
    lines = [f"{m['message_id']}  {m['state']} at {m['finished_at']} after {m['attempts']} attempt(s), "
             f"last error: {m['last_error']}" for m in _planned(plan)]
    if acted:
        lines.append(f"re-drove {len(plan.rows)} message(s): due now; each is still checked before it is sent")
    else:
        lines.append(f"would re-drive {len(plan.rows)} message(s); nothing was changed: add --yes to do it")
    return "\n".join(lines)


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
