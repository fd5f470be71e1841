"""`authledger privacy`: erase a person (crypto-shredding) and rotate master keys."""

from __future__ import annotations

import click

from commands.output import cli_metadata, emit, json_option, progress_bar
from infra.bootstrap import App
from infra.services import rewrap as key_rotation
from infra.services.privacy import forget as forget_subject


@click.group()
def privacy() -> None:
    """Personal data: erase a user's (crypto-shredding), re-wrap data keys (docs/operations.md)."""


@privacy.command("forget")
@click.option("--user-id", required=True, help="The application's id for the user.")
@click.option("--actor", help="Who asked for the erasure, for the record (default: $USER, else your OS account).")
@json_option
@click.pass_obj
def privacy_forget(app: App, user_id: str, actor: str | None, as_json: bool) -> None:
    """Destroy the user's data keys: their addresses in the log read [erased] from now on."""
    if actor is not None and not actor.strip():
        raise click.BadParameter("must not be empty", param_hint="--actor")
    erasure = forget_subject(app.services, user_id, metadata=cli_metadata("privacy forget", actor))
    if not erasure.recorded:
        said = f"user {user_id} was already erased at {erasure.erased_at.isoformat()}; nothing changed"
    elif not erasure.key_ids:
        said = f"user {user_id} had no personal data key left; the erasure is recorded"
    else:
        said = (f"user {user_id} erased: data key {', '.join(erasure.key_ids)} destroyed; their personal data "
                "reads [erased] from now on")
    emit(erasure.as_dict(), as_json, said)


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
