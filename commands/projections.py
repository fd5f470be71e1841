"""`authledger projections`: list, check, rebuild, verify and replay the read models, and run the catch-up."""

from __future__ import annotations

import signal
import sys
from datetime import datetime

import click

from commands.output import emit, json_option, parse_instant, rate_progress_bar
from infra.errors import ProjectionMismatch
from infra.bootstrap import App

from infra.eventlog.reader import as_of as log_as_of
from infra.eventlog.reader import to_position as log_to_position
from infra.logs import configure_logging
from infra.projector.catchup import CatchUpRunner
from infra.projector.rebuild import log_length
from infra.projector.rebuild import rebuild as rebuild_projection
from infra.projector.registry import Projection, all_projections, projection_named
from infra.projector.replay import drop_replay, replay_into
from infra.projector.status import projection_status, render_status
from infra.projector.verify import verify as verify_projection


@click.group()
def projections() -> None:
    """Read models: list, status, rebuild, verify, replay as of a moment, and the catch-up runner."""


def _targets(name: str | None, every: bool, *, default_all: bool = False) -> list[Projection]:
    if name and every:
        raise click.UsageError("give a projection name or --all, not both")
    if name:
        return [projection_named(name)]
    if every or default_all:
        return all_projections()
    raise click.UsageError("give a projection name (see `authledger projections list`) or --all")


@projections.command("list")
@json_option
@click.pass_obj
def projections_list(app: App, as_json: bool) -> None:
    """Every projection: name, kind (inline or catch-up), tables, what it holds."""
    data = [{"name": p.name, "kind": p.kind, "tables": [t.name for t in p.tables], "description": p.description}
            for p in all_projections()]
    emit(data, as_json, "\n".join(f"{p['name']:<16} {p['kind']:<9} {', '.join(p['tables']):<20} {p['description']}"
                                  for p in data))


@projections.command("status")
@click.option("--warn-after", default=60.0, show_default=True, type=click.FloatRange(0),
              help="Warn when one transaction has held the horizon back this many seconds.")
@json_option
@click.pass_obj
def projections_status(app: App, warn_after: float, as_json: bool) -> None:
    """Checkpoints, lag in events and seconds, and the oldest transaction holding the horizon back."""
    status = projection_status(app.admin_engine, warn_after_seconds=warn_after)
    emit(status.as_dict(), as_json, render_status(status))


@projections.command("rebuild")
@click.argument("name", required=False)
@click.option("--all", "every", is_flag=True, help="Rebuild every projection, one after the other.")
@click.option("--batch-size", default=5000, show_default=True, type=click.IntRange(1, 100_000))
@json_option
@click.pass_obj
def projections_rebuild(app: App, name: str | None, every: bool, batch_size: int, as_json: bool) -> None:
    """Rebuild from the log into shadow tables while traffic runs, then swap them in."""
    results = []
    for projection in _targets(name, every):
        bar, update = rate_progress_bar(log_length(app.engine, projection), f"rebuilding {projection.name}")
        with bar:
            result = rebuild_projection(app.admin_engine, projection, batch_size=batch_size, progress=update)
        results.append(result)
        if not as_json:
            click.echo(f"{result.projection}: rebuilt from {result.events} events in {result.seconds:.1f} s "
                       f"({result.events_per_second:,.0f} events/s); writers waited {result.swap_seconds * 1000:.0f} "
                       "ms for the swap")
    if as_json:
        emit([{"projection": r.projection, "events": r.events, "seconds": round(r.seconds, 3),
               "events_per_second": round(r.events_per_second), "swap_seconds": round(r.swap_seconds, 4),
               "swap_attempts": r.swap_attempts} for r in results], True, "")


@projections.command("verify")
@click.argument("name", required=False)
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 10_000),
              help="Differing rows to print per projection.")
@json_option
@click.pass_obj
def projections_verify(app: App, name: str | None, limit: int, as_json: bool) -> None:
    """Rebuild to the side and compare with the live tables; exit non-zero on any difference."""
    reports = []
    for projection in _targets(name, False, default_all=True):
        bar, update = rate_progress_bar(log_length(app.engine, projection), f"verifying {projection.name}")
        with bar:
            report = verify_projection(app.admin_engine, projection, progress=update, limit=limit)
        reports.append(report)
        if not as_json:
            click.echo(report.summary())
    if as_json:
        emit([r.as_dict() for r in reports], True, "")
    differing = [r.projection for r in reports if not r.ok]
    if differing:
        error = ProjectionMismatch(f"{', '.join(differing)} differ from a replay of the log; "
                                   "`authledger projections rebuild NAME` rebuilds one from the log")
        click.echo(f"Error: {error.message}", err=True)
        sys.exit(error.exit_code)


@projections.command("replay")
@click.argument("name", required=False)
@click.option("--as-of", callback=parse_instant, help="The moment, ISO 8601 (UTC if no offset).")
@click.option("--to-position", type=click.IntRange(min=0), help="Up to this global position instead.")
@click.option("--into", "schema", help="The schema to build into (created; lower-case letters, digits, _).")
@click.option("--drop", "drop_schema", help="Drop a schema made by an earlier replay, and nothing else.")
@json_option
@click.pass_obj
def projections_replay(app: App, name: str | None, as_of: datetime | None, to_position: int | None,
                       schema: str | None, drop_schema: str | None, as_json: bool) -> None:
    """Build a projection as it stood at a moment into a side schema, for incident review."""
    if drop_schema:
        if name or schema or as_of or to_position is not None:
            raise click.UsageError("--drop takes only the schema name")
        drop_replay(app.admin_engine, drop_schema)
        emit({"dropped": drop_schema}, as_json, f"dropped schema {drop_schema}")
        return
    if as_of is not None and to_position is None:
        bound = log_as_of(as_of)
    elif to_position is not None and as_of is None:
        bound = log_to_position(to_position)
    else:
        bound = None
    if not name or not schema or bound is None:
        raise click.UsageError("give NAME, --into SCHEMA and one of --as-of or --to-position")
    bar, update = rate_progress_bar(0, f"replaying {name}")
    with bar:
        result = replay_into(app.admin_engine, projection_named(name), schema, bound, progress=update)
    data = {"projection": result.projection, "schema": result.schema, "tables": result.tables,
            "events": result.events, "bound": result.bound, "warnings": result.warnings}
    emit(data, as_json, "\n".join([f"{result.projection} {result.bound}: {result.events} events folded into "
                                   f"{', '.join(result.tables)}", *(f"warning: {w}" for w in result.warnings)]))


@projections.command("run")
@click.option("--once", is_flag=True, help="Catch up to the horizon, then exit.")
@click.option("--batch-size", default=1000, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--poll-seconds", default=5.0, show_default=True, type=click.FloatRange(0.05))
@json_option
@click.pass_obj
def projections_run(app: App, once: bool, batch_size: int, poll_seconds: float, as_json: bool) -> None:
    """Run the catch-up projections: follow the log until stopped (SIGTERM or Ctrl-C)."""
    runner = CatchUpRunner(app.engine, batch_size=batch_size, poll_seconds=poll_seconds)
    if once:
        folded = runner.run_once()
        emit(folded, as_json, ", ".join(f"{name}: {n} events" for name, n in folded.items()))
        return
    configure_logging(app.settings.log_format)
    # SIGTERM and Ctrl-C ask the runner to stop: it finishes its batch and
    # closes its listener before the process lets go of the database, so a
    # normal stop logs no lost connection.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: runner.stop())
    runner.run()
    emit({"stopped": True, "events": runner.applied}, as_json,
         "stopped; folded " + ", ".join(f"{name}: {n} events" for name, n in runner.applied.items()))
