"""`authledger config`: the effective configuration, and where each value came from."""

from __future__ import annotations

import os

import click
from click.core import ParameterSource

from commands.output import emit, json_option
from infra.bootstrap import App
from infra.config.settings import shown_settings


@click.group()
def config() -> None:
    """Inspect the effective configuration."""


@config.command("show")
@json_option
@click.pass_context
def config_show(ctx: click.Context, as_json: bool) -> None:
    """Print the effective configuration, secrets masked, each value with its source."""
    app: App = ctx.obj
    root = ctx.find_root()
    # The root group's --database-url and --data-dir also read the environment: ask click which it was.
    command_line = frozenset(name for name in ("database_url", "data_dir")
                             if root.get_parameter_source(name) == ParameterSource.COMMANDLINE)
    shown = shown_settings(app.settings, os.environ, command_line)
    lines = [(f"{s.variable}={'(unset)' if s.value is None else s.value}", s.source) for s in shown]
    width = max(len(line) for line, _ in lines)
    emit({s.variable: {"value": s.value, "source": s.source} for s in shown}, as_json,
         "\n".join(f"{line.ljust(width)}  # {source}" for line, source in lines))
