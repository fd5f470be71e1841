"""`authledger privacy`: erase a person (crypto-shredding) and rotate master keys."""

from __future__ import annotations

import sys

import click

from domain.privacy import erasure_reason, subject_of
from commands.output import cli_metadata, emit, existing_tenant, json_option, progress_bar
from infra.bootstrap import App
from infra.services import rewrap as key_rotation
from infra.services import privacy as erasure_service


@click.group()
def privacy() -> None:
    """Personal data: erase a user's (crypto-shredding), re-wrap data keys (docs/operations.md)."""


def on_terminal() -> bool:
    """Whether someone can answer a question: stdin is a terminal."""
    return sys.stdin.isatty()


@privacy.command("forget")
@click.option("--user-id", required=True, help="The application's id for the user.")
@existing_tenant("The tenant (application) the user belongs to.")
@click.option("--reason", required=True, help="Why, for the record (a ticket, a request); no email address.")
@click.option("--dry-run", is_flag=True, help="Say what would be destroyed; change nothing.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation (required when not on a terminal).")
@click.option("--actor", help="Who asked for the erasure, for the record (default: $USER, else your OS account).")
@json_option
@click.pass_obj
def privacy_forget(app: App, user_id: str, tenant: str, reason: str, dry_run: bool, yes: bool, actor: str | None,
                   as_json: bool) -> None:
    """Destroy the user's data keys: their addresses in the log read [erased] from now on. Irreversible."""
    if actor is not None and not actor.strip():
        raise click.BadParameter("must not be empty", param_hint="--actor")
    subject = subject_of(tenant, user_id)
    erasure_reason(reason)  # a bad reason is refused before anything is asked or read
    if not (dry_run or yes or on_terminal()):
        raise click.UsageError("privacy forget cannot be undone and there is no terminal to confirm on: pass --yes "
                               "to erase without a question (see what it would destroy with --dry-run)")
    if dry_run or not yes:
        found = erasure_service.preview(app.services, subject)
        if dry_run:
            emit({**found.as_dict(), "user_id": user_id, "tenant": tenant, "dry_run": True}, as_json,
                 "dry run, nothing changed: " + _would(found, user_id))
            return
        click.echo(_would(found, user_id), err=True)
        click.confirm(f"Erase user {user_id} for good?", abort=True, err=True)
    erasure = erasure_service.forget(app.services, subject, reason=reason,
                                     metadata=cli_metadata("privacy forget", actor))
    if not erasure.recorded:
        said = f"user {user_id} was already erased at {erasure.erased_at.isoformat()}; nothing changed"
    elif not erasure.key_ids:
        said = f"user {user_id} had no personal data key left; the erasure is recorded"
    else:
        said = (f"user {user_id} erased: data key {', '.join(erasure.key_ids)} destroyed; their personal data "
                "reads [erased] from now on")
    emit({**erasure.as_dict(), "user_id": user_id, "tenant": tenant}, as_json, said)


def _would(found: erasure_service.ErasurePreview, user_id: str) -> str:
    if not found.key_ids:
        already = f" (already erased at {found.erased_at.isoformat()})" if found.erased_at else ""
        return f"user {user_id} has no personal data key left{already}; an erasure would only be recorded"
    return (f"erasing user {user_id} would destroy data key {', '.join(found.key_ids)}: the personal data of "
            f"{found.sealed_events} event(s) would read [erased]; {found.open_links} reset link(s) and "
            f"{found.open_codes} code(s) of theirs are still open")


@privacy.command("rewrap")
@click.option("--batch-size", default=key_rotation.DEFAULT_BATCH_SIZE, show_default=True,
              type=click.IntRange(1, 10_000), help="Keys per transaction.")
@click.option("--dry-run", is_flag=True, help="Check the master keys and count what would move; change nothing.")
@json_option
@click.pass_obj
def privacy_rewrap(app: App, batch_size: int, dry_run: bool, as_json: bool) -> None:
    """Re-wrap every data key under the newest master key, so older master key ids can be retired."""
    master = app.master_keys
    to_move = key_rotation.pending(app.services, master, check=True)  # refused before a bar shows
    if dry_run or not to_move:
        result = key_rotation.rewrap(app.services, master, dry_run=dry_run)
    else:
        with progress_bar(sum(to_move.values()), "re-wrapping") as bar:
            result = key_rotation.rewrap(app.services, master, batch_size=batch_size,
                                         metadata=cli_metadata("privacy rewrap"), progress=bar.update)
    emit(result.as_dict(), as_json, result.summary())
