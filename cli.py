"""The authledger command line: parse, call a service function, print.

The root group builds the ``App`` into ``ctx.obj``; every command takes it
with ``pass_obj``. Any ``AuthledgerError`` becomes one line on stderr and the
error's exit code: no traceback reaches a user. The commands themselves live
in ``commands/``, one module per word, and are imported only when that word
is run or its help is shown (click's "lazily loading subcommands" pattern):
``authledger --help`` and light commands such as ``config show`` never pay
for SQLAlchemy, the HTTP app or the audit code.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from typing import Any

import click

from domain.errors import AuthledgerError

# word -> (module:attribute, the one line `authledger --help` shows for it).
# The line is the command's own first docstring line, repeated here so that
# listing the commands imports none of them; tests/unit/test_cli_layout.py
# checks that the two agree.
COMMANDS: Mapping[str, tuple[str, str]] = {
    "db": ("commands.db:db", "Create and check the database schema."),
    "config": ("commands.config:config", "Inspect the effective configuration."),
    "reset": ("commands.reset:reset", "Password reset: request a link, verify or consume a token."),
    "otp": ("commands.otp:otp", "Email one-time codes: request a challenge, verify a code."),
    "worker": ("commands.worker:worker", "Claim due emails and deliver them."),
    "outbox": ("commands.outbox:outbox", "Inspect outbound email."),
    "serve": ("commands.serve:serve",
              "Run the HTTP API and the delivery workers; SIGTERM or Ctrl-C stops both cleanly."),
    "tenants": ("commands.tenants:tenants", "The applications that own users; the default tenant always exists."),
    "clients": ("commands.clients:clients", "API keys of the applications that call the HTTP API."),
    "webhooks": ("commands.webhooks:webhooks",
                 "Endpoints of a tenant, told what happened, signed (Standard Webhooks)."),
    "projections": ("commands.projections:projections",
                    "Read models: list, status, rebuild, verify, replay as of a moment, and the catch-up runner."),
    "history": ("commands.review:history_command",
                "Everything that happened to a user's requests and emails, explained, then as a timeline."),
    "explain": ("commands.review:explain_command",
                "Why a link worked or not, and what happened to each email: sentences, then a timeline."),
    "audit": ("commands.audit:audit",
              "Seal the log into a hash chain, sign its head, verify and export it (docs/audit.md)."),
    "users": ("commands.users:users",
              "Support actions on a user: withdraw their open links and codes, or send them a fresh one."),
    "bounces": ("commands.bounces:bounces", "Bounce reports (RFC 3464) from the envelope sender's mailbox."),
    "suppressions": ("commands.suppressions:suppressions",
                     "A tenant's suppression list: addresses that bounced for good or complained."),
    "privacy": ("commands.privacy:privacy",
                "Personal data: erase a user's (crypto-shredding), re-wrap data keys (docs/operations.md)."),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported when one is run or its help is shown, not before."""

    def __init__(self, *args: Any, lazy_commands: Mapping[str, tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = lazy_commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_commands and cmd_name not in self.commands:
            module_name, attribute = self.lazy_commands[cmd_name][0].split(":")
            command = getattr(importlib.import_module(module_name), attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{module_name}.{attribute} is not a click command")
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list as click would show it, from the summaries: no command is imported."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = [(name, self._listed(name).get_short_help_str(limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def _listed(self, name: str) -> click.Command:
        """The command if loaded, else a stand-in carrying its summary, shortened by click the same way."""
        if name in self.commands:
            return self.commands[name]
        return click.Command(name, help=self.lazy_commands[name][1])


class UserFacingError(click.ClickException):
    def __init__(self, error: AuthledgerError) -> None:
        super().__init__(error.message)
        # click declares exit_code a ClassVar, yet reads it from the instance: each error brings its own.
        self.exit_code = error.exit_code  # type: ignore[misc]


class AuthledgerGroup(LazyGroup):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except AuthledgerError as error:
            raise UserFacingError(error) from None


@click.group(cls=AuthledgerGroup, lazy_commands=COMMANDS)
@click.version_option(package_name="authledger", prog_name="authledger")
@click.option("--database-url", envvar="DATABASE_URL", help="PostgreSQL URL; embedded server when absent.")
@click.option("--data-dir", envvar="AUTHLEDGER_DATA_DIR", help="Where the embedded server and Maildir live.")
@click.pass_context
def cli(ctx: click.Context, database_url: str | None, data_dir: str | None) -> None:
    """authledger: password-reset and email-OTP delivery on an append-only log."""
    from infra.bootstrap import App  # here, not above: `--help` and `--version` need no settings

    app = App.from_environment(os.environ, {"database_url": database_url, "data_dir": data_dir})
    ctx.obj = app
    ctx.call_on_close(app.close)


def main() -> None:
    try:
        cli(prog_name="authledger")
    except Exception as error:  # a bug, not a user error: still no traceback for the user
        if os.environ.get("AUTHLEDGER_DEBUG"):
            raise
        click.echo(f"Error: internal error ({type(error).__name__}); rerun with AUTHLEDGER_DEBUG=1 for details",
                   err=True)
        sys.exit(70)
