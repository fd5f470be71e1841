"""The authledger command line: parse, call a service function, print.

The root group builds the ``App`` into ``ctx.obj``; every command takes it
with ``pass_obj``. Any ``AuthledgerError`` becomes one line on stderr and the
error's exit code: no traceback reaches a user.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from domain.errors import AuthledgerError
from infra.bootstrap import App
from infra.config import masked
from infra.schema import check_schema, init_schema


class UserFacingError(click.ClickException):
    def __init__(self, error: AuthledgerError) -> None:
        super().__init__(error.message)
        self.exit_code = error.exit_code


class AuthledgerGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except AuthledgerError as error:
            raise UserFacingError(error) from None


def emit(data: Any, as_json: bool, text: str) -> None:
    click.echo(json.dumps(data, indent=2, default=str) if as_json else text)


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for tools.")


@click.group(cls=AuthledgerGroup)
@click.option("--database-url", envvar="DATABASE_URL", help="PostgreSQL URL; embedded server when absent.")
@click.option("--data-dir", envvar="AUTHLEDGER_DATA_DIR", help="Where the embedded server and Maildir live.")
@click.pass_context
def cli(ctx: click.Context, database_url: str | None, data_dir: str | None) -> None:
    """authledger: password-reset and email-OTP delivery on an append-only log."""
    app = App.from_environment(os.environ, {"database_url": database_url, "data_dir": data_dir})
    ctx.obj = app
    ctx.call_on_close(app.close)


@cli.group()
def db() -> None:
    """Create and check the database schema."""


@db.command("init")
@json_option
@click.pass_obj
def db_init(app: App, as_json: bool) -> None:
    """Apply schema.sql (safe to run again)."""
    result = init_schema(app.admin_engine)
    said = "already initialised; schema re-applied, nothing changed" if result.already_initialised else "initialised"
    emit(
        {"version": result.version, "already_initialised": result.already_initialised,
         "database": app.database.display_url},
        as_json,
        f"database {app.database.display_url}: {said} (schema version {result.version})",
    )


@db.command("check")
@json_option
@click.pass_obj
def db_check(app: App, as_json: bool) -> None:
    """Report schema version, append-only guards and the transaction-id horizon."""
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
    }
    lines = [
        f"schema version   {report.schema_version} (expected {report.expected_version})",
        "append-only      " + ", ".join(f"{name} {'on' if on else 'MISSING'}" for name, on in report.guards.items()),
        "app role         " + ", ".join(f"{p} {'yes' if g else 'no'}" for p, g in report.app_role_privileges.items()),
        f"transaction ids  next {report.next_xid}, highest in log {report.highest_logged_xid}",
    ]
    lines += [f"problem: {problem}" for problem in report.problems]
    lines.append("ok" if report.ok else "NOT OK")
    emit(data, as_json, "\n".join(lines))
    if not report.ok:
        sys.exit(1)


@cli.group()
def config() -> None:
    """Inspect the effective configuration."""


@config.command("show")
@json_option
@click.pass_obj
def config_show(app: App, as_json: bool) -> None:
    """Print the effective configuration, secrets masked."""
    shown = masked(app.settings)
    emit(shown, as_json, "\n".join(f"{name}={value}" for name, value in shown.items()))


def main() -> None:
    try:
        cli(prog_name="authledger")
    except Exception as error:  # a bug, not a user error: still no traceback for the user
        if os.environ.get("AUTHLEDGER_DEBUG"):
            raise
        click.echo(f"Error: internal error ({type(error).__name__}); rerun with AUTHLEDGER_DEBUG=1 for details", err=True)
        sys.exit(70)
