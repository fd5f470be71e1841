"""What every command shares: JSON or text output, progress bars, times, metadata and error wording."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import click

from domain.errors import IdempotencyMismatch, InvalidInput
from domain.input_checks import check_actor
from domain.tenants import DEFAULT_TENANT, check_tenant_name


def emit(data: Any, as_json: bool, text: str) -> None:
    click.echo(json.dumps(data, indent=2, default=str) if as_json else text)


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for tools.")


def _tenant_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A well-formed tenant that exists (the default, or one created): the HTTP API's callers hold a key of
    a tenant that exists, and the command line refuses the same, before anything is written or looked up."""
    if value is None:
        return None
    try:
        check_tenant_name(value)
        if value != DEFAULT_TENANT:
            from infra.services.tenants import require_tenant  # only when a tenant is named

            require_tenant(ctx.find_root().obj.engine, value)
    except InvalidInput as error:
        raise click.BadParameter(error.message) from None
    return value


tenant_option = click.option(
    "--tenant", default=DEFAULT_TENANT, show_default=True, callback=_tenant_name,
    help="The application (tenant) the user belongs to; user ids mean something only inside their tenant.",
)

# Checked by the command it builds (domain.locales.parse_locale): a bad tag is exit 2 with the same words as over HTTP.
locale_option = click.option(
    "--locale", help="The end user's language, a BCP 47 tag (de, de-AT); the email is in the best match, else "
                     "the tenant's default, else English.",
)


def existing_tenant(help: str, default: str | None = DEFAULT_TENANT) -> Any:
    """A ``--tenant`` option with ``help`` that refuses a tenant that does not exist, as ``tenant_option``."""
    return click.option("--tenant", default=default, show_default=default is not None, callback=_tenant_name,
                        help=help)


CLI_CLIENT = "cli"


def cli_metadata(command: str, actor: str | None = None) -> dict[str, str]:
    """Who ran ``command``: ``actor`` if given, else $USER, else the OS account (never "unknown").

    An ``actor`` given is stored in clear with every event: ``InvalidInput`` when it holds an email address.
    """
    if actor is not None:
        actor = check_actor(actor)
    return {"actor": f"cli:{actor or os.environ.get('USER') or os_user()}", "client": CLI_CLIENT, "command": command}


def os_user() -> str:
    """The account's name from the password database (for when $USER is unset); its uid if it has none."""
    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # a container running as a uid with no passwd entry
        return f"uid {uid}"


def progress_bar(length: int, label: str) -> Any:
    """A progress bar on stderr, so that --json on stdout stays clean."""
    return click.progressbar(length=max(length, 0), label=label, file=sys.stderr)


def parse_instant(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 date or time") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def rate_progress_bar(length: int, label: str) -> Any:
    """A progress bar on stderr with events/s beside the ETA; returns (bar, update)."""
    bar = click.progressbar(length=max(length, 1), label=label, file=sys.stderr, show_eta=True,
                            item_show_func=lambda rate: rate)
    # A rate needs elapsed time, not the time of day: a monotonic timer, not the configured clock.
    started, done = time.monotonic(), [0]

    def update(n: int) -> None:
        done[0] += n
        seconds = time.monotonic() - started
        bar.update(n, f"{done[0] / seconds:,.0f} events/s" if seconds > 0 else None)

    return bar, update


@contextlib.contextmanager
def explained_mismatch(idempotency_key: str | None, user_id: str, what: str) -> Iterator[None]:
    """Name the key and what differs (never the stored value) when a key is reused."""
    try:
        yield
    except IdempotencyMismatch:
        raise IdempotencyMismatch(
            f"idempotency key {idempotency_key!r} was already used for user {user_id} with {what}; "
            "retry with the same parameters, or use a new key for a new request"
        ) from None
