"""The authledger command line: parse, call a service function, print.

The root group builds the ``App`` into ``ctx.obj``; every command takes it
with ``pass_obj``. Any ``AuthledgerError`` becomes one line on stderr and the
error's exit code: no traceback reaches a user. The commands themselves live
in ``commands/``, one module per group.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from commands import audit, clients, config, db, otp, outbox, privacy, projections, reset, review, serve, worker
from domain.errors import AuthledgerError
from infra.bootstrap import App


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


@click.group(cls=AuthledgerGroup)
@click.option("--database-url", envvar="DATABASE_URL", help="PostgreSQL URL; embedded server when absent.")
@click.option("--data-dir", envvar="AUTHLEDGER_DATA_DIR", help="Where the embedded server and Maildir live.")
@click.pass_context
def cli(ctx: click.Context, database_url: str | None, data_dir: str | None) -> None:
    """authledger: password-reset and email-OTP delivery on an append-only log."""
    app = App.from_environment(os.environ, {"database_url": database_url, "data_dir": data_dir})
    ctx.obj = app
    ctx.call_on_close(app.close)


for command in [
    db.db, config.config, reset.reset, otp.otp, worker.worker, outbox.outbox,
    serve.serve, clients.clients, projections.projections, review.history_command, review.explain_command,
    audit.audit, privacy.privacy,
]:
    cli.add_command(command)


def main() -> None:
    try:
        cli(prog_name="authledger")
    except Exception as error:  # a bug, not a user error: still no traceback for the user
        if os.environ.get("AUTHLEDGER_DEBUG"):
            raise
        click.echo(f"Error: internal error ({type(error).__name__}); rerun with AUTHLEDGER_DEBUG=1 for details", err=True)
        sys.exit(70)
