"""`authledger bounces`: bounce reports (RFC 3464) from the envelope sender's mailbox."""

from __future__ import annotations

from pathlib import Path

import click

from commands.output import cli_metadata, emit, json_option
from infra.bootstrap import App
from infra.feedback.bounce_mailbox import check_maildir, ingest_maildir


@click.group()
def bounces() -> None:
    """Bounce reports (RFC 3464) from the envelope sender's mailbox."""


@bounces.command("ingest")
@click.option("--maildir", "path", required=True, type=click.Path(path_type=Path),
              help="The Maildir the bounces arrive in; each file of new/ is read once, then moved to cur/.")
@json_option
@click.pass_obj
def ingest(app: App, path: Path, as_json: bool) -> None:
    """Record each report in the Maildir's new/ on its email; a file that is no report is named, not fatal."""
    done = ingest_maildir(app.services, check_maildir(path), cli_metadata("bounces ingest"))
    lines = [f"{done.recorded} report(s) recorded, {done.repeated} already recorded"]
    lines += [f"set aside (moved to cur/, flagged): {name}: {why}" for name, why in done.bad]
    emit(done.as_dict(), as_json, "\n".join(lines))
