"""`authledger config`: the effective configuration."""

from __future__ import annotations

import click

from commands.output import emit, json_option
from infra.bootstrap import App
from infra.config import masked


@click.group()
def config() -> None:
    """Inspect the effective configuration."""


@config.command("show")
@json_option
@click.pass_obj
def config_show(app: App, as_json: bool) -> None:
    """Print the effective configuration, secrets masked."""
    shown = masked(app.settings)
    emit(shown, as_json, "\n".join(f"{name}={value}" for name, value in shown.items()))
