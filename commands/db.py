"""`authledger db`: create and check the database schema; its URL, and psql on it."""

from __future__ import annotations

import os
import sys

import click

from commands.output import emit, json_option
from infra.bootstrap import App
from infra.db.embedded import psql_program
from infra.db.schema import check_schema, init_schema


@click.group()
def db() -> None:
    """Create and check the database schema."""


@db.command("init")
@json_option
@click.pass_obj
def db_init(app: App, as_json: bool) -> None:
    """Apply schema.sql (safe to run again)."""
    result = init_schema(app.admin_engine)
    if result.already_initialised:
        said = "already initialised; schema re-applied, nothing changed"
    elif result.upgraded_from is not None:
        said = f"upgraded from schema version {result.upgraded_from}"
    else:
        said = "initialised"
    emit(
        {"version": result.version, "already_initialised": result.already_initialised,
         "upgraded_from": result.upgraded_from,
         "database": app.database.display_url},
        as_json,
        f"database {app.database.display_url}: {said} (schema version {result.version})",
    )


@db.command("check")
@json_option
@click.pass_obj
def db_check(app: App, as_json: bool) -> None:
    """Report schema version, append-only guards, the transaction-id horizon and synchronous replication."""
    report = check_schema(app.admin_engine)
    data = {
        "ok": report.ok,
        "schema_version": report.schema_version,
        "expected_version": report.expected_version,
        "guards": report.guards,
        "app_role_privileges": report.app_role_privileges,
        "highest_logged_xid": report.highest_logged_xid,
        "next_xid": report.next_xid,
        "problems": report.problems,
        "replication": {"synchronous_standby_names": report.synchronous_standby_names,
                        "synchronous_commit": report.synchronous_commit,
                        "synchronous_standbys": report.synchronous_standbys},
        "warnings": report.warnings,
    }
    lines = [
        f"schema version   {report.schema_version} (expected {report.expected_version})",
        *(f"append-only      {table}: " + ", ".join(f"{name} {'on' if on else 'MISSING'}" for name, on in found.items())
          for table, found in report.guards.items()),
        *(f"app role         {table}: " + ", ".join(f"{p} {'yes' if g else 'no'}" for p, g in granted.items())
          for table, granted in report.app_role_privileges.items()),
        f"transaction ids  next {report.next_xid}, highest in log {report.highest_logged_xid}",
    ]
    lines += [f"problem: {problem}" for problem in report.problems]
    lines += [f"warning: {warning}" for warning in report.warnings]
    lines.append("ok" if report.ok else "NOT OK")
    emit(data, as_json, "\n".join(lines))
    if not report.ok:
        sys.exit(1)


def _libpq_url(app: App, show_password: bool) -> str:
    """The configured database's URL as psql and libpq take it (postgresql://)."""
    return app.database.plain_url if show_password else app.database.tool_url


@db.command("url")
@click.option("--show-password", is_flag=True, help="Print the password instead of ***.")
@click.pass_obj
def db_url(app: App, show_password: bool) -> None:
    """Print the URL of the configured database, the embedded one included."""
    click.echo(_libpq_url(app, show_password))
    if app.database.embedded:
        click.echo("note: the embedded server runs while an authledger process uses it "
                   "(`authledger serve`, or `authledger db shell`)", err=True)


@db.command("shell", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("psql_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_obj
def db_shell(app: App, psql_args: tuple[str, ...]) -> None:
    """Open psql on the configured database; PSQL_ARGS go to psql (e.g. -c "SELECT ...")."""
    program = psql_program()
    if program is None:
        raise click.ClickException("psql is not installed: install the PostgreSQL client "
                                   "(e.g. apt install postgresql-client), or use `authledger db url`")
    url = _libpq_url(app, show_password=True)
    sys.stdout.flush()
    # exec keeps this process id, which the embedded server counts as a user: it
    # stays up while psql runs and its watchdog stops it once psql exits.
    os.execv(program, [program, *psql_args, url])
