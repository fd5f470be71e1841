"""The CLI's layout: one module per top-level command, named after the word a user types.

A reader who sees `authledger privacy forget` opens commands/privacy.py. The
two incident-review commands, `history` and `explain`, share commands/review.py
because they answer from the same lookup.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import click

from cli import cli

ROOT = Path(__file__).resolve().parents[2]
AUTHLEDGER = str(Path(sys.executable).parent / "authledger")
SHARED_MODULES = {"__init__", "output"}
MODULE_OF = {"history": "review", "explain": "review"}


def command_modules() -> dict[str, ModuleType]:
    return {path.stem: importlib.import_module(f"commands.{path.stem}")
            for path in sorted((ROOT / "commands").glob("*.py")) if path.stem not in SHARED_MODULES}


def top_level_commands_defined_in(module: ModuleType) -> set[str]:
    """Names of the top-level CLI commands whose click objects this module itself defines."""
    return {value.name for value in vars(module).values()
            if isinstance(value, click.Command) and value.name in cli.commands
            and value.callback is not None and value.callback.__module__ == module.__name__}


def test_every_top_level_command_is_defined_in_exactly_one_module_named_after_it() -> None:
    modules = command_modules()
    for name, command in cli.commands.items():
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
    assert listed == set(cli.commands)


def test_no_command_reads_the_wall_clock_instead_of_the_configured_clock() -> None:
    wall_clock = re.compile(r"datetime\.now\(|date\.today\(|datetime\.utcnow\(|time\.time\(")
    for path in [ROOT / "cli.py", *sorted((ROOT / "commands").glob("*.py"))]:
        assert not wall_clock.search(path.read_text()), f"{path.name} reads the wall clock; use app.clock.now()"
