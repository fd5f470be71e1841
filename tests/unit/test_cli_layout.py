"""The CLI's layout: one module per top-level command, named after the word a user types.

A reader who sees `authledger privacy forget` opens commands/privacy.py. The
two incident-review commands, `history` and `explain`, share commands/review.py
because they answer from the same lookup.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import click

from cli import COMMANDS, cli

ROOT = Path(__file__).resolve().parents[2]
AUTHLEDGER = str(Path(sys.executable).parent / "authledger")
SHARED_MODULES = {"__init__", "output"}
MODULE_OF = {"history": "review", "explain": "review"}


def top_level_commands() -> dict[str, click.Command]:
    """Every word of the root group, each loaded (the group imports a command only when asked for it)."""
    with click.Context(cli) as ctx:
        return {name: command for name in cli.list_commands(ctx) if (command := cli.get_command(ctx, name))}


def command_modules() -> dict[str, ModuleType]:
    return {path.stem: importlib.import_module(f"commands.{path.stem}")
            for path in sorted((ROOT / "commands").glob("*.py")) if path.stem not in SHARED_MODULES}


def top_level_commands_defined_in(module: ModuleType) -> set[str]:
    """Names of the top-level CLI commands whose click objects this module itself defines."""
    return {value.name for value in vars(module).values()
            if isinstance(value, click.Command) and value.name in COMMANDS
            and value.callback is not None and value.callback.__module__ == module.__name__}


def test_every_top_level_command_is_defined_in_exactly_one_module_named_after_it() -> None:
    modules = command_modules()
    for name, command in top_level_commands().items():
        defining = [stem for stem, module in modules.items() if name in top_level_commands_defined_in(module)]
        assert defining == [MODULE_OF.get(name, name)], f"`authledger {name}` is defined in {defining}"
        assert command.callback is not None and command.callback.__module__ == f"commands.{defining[0]}"


def test_every_command_module_holds_a_command_a_user_can_type() -> None:
    for stem, module in command_modules().items():
        assert top_level_commands_defined_in(module), f"commands/{stem}.py defines no top-level command"


def test_authledger_help_lists_every_command() -> None:
    result = subprocess.run([AUTHLEDGER, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    listed = set(re.findall(r"^  (\S+)", result.stdout.split("Commands:", 1)[1], flags=re.MULTILINE))
    assert listed == set(top_level_commands())


def test_the_command_list_shows_each_commands_own_summary_without_importing_it() -> None:
    for name, command in top_level_commands().items():
        summary = click.Command(name, help=COMMANDS[name][1]).get_short_help_str(200)
        assert summary == command.get_short_help_str(200), name
    script = "import json, sys, cli; cli.cli(['--help'], standalone_mode=False); print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
    loaded = set(json.loads(result.stdout.strip().splitlines()[-1]))
    assert not {name for name in loaded if name.startswith(("commands.", "sqlalchemy", "infra.http"))}


def test_version_is_the_installed_distributions() -> None:
    result = subprocess.run([AUTHLEDGER, "--version"], capture_output=True, text=True, timeout=60)
    assert result.stdout == f"authledger, version {importlib.metadata.version('authledger')}\n"


def test_no_command_reads_the_wall_clock_instead_of_the_configured_clock() -> None:
    wall_clock = re.compile(r"datetime\.now\(|date\.today\(|datetime\.utcnow\(|time\.time\(")
    for path in [ROOT / "cli.py", *sorted((ROOT / "commands").glob("*.py"))]:
        assert not wall_clock.search(path.read_text()), f"{path.name} reads the wall clock; use app.clock.now()"
