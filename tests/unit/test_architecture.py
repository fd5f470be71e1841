"""Dependencies point inward: domain <- projections <- infra <- cli."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_import_layers_hold() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def imported_top_levels(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_domain_imports_only_the_standard_library_and_attrs() -> None:
    allowed = set(sys.stdlib_module_names) | {"attrs", "domain"}
    for module in (ROOT / "domain").glob("*.py"):
        assert imported_top_levels(module) <= allowed, module.name


def test_projections_import_only_the_domain_and_the_standard_library() -> None:
    allowed = set(sys.stdlib_module_names) | {"attrs", "domain", "projections"}
    for module in (ROOT / "projections").glob("*.py"):
        assert imported_top_levels(module) <= allowed, module.name


def test_nothing_below_the_cli_imports_it() -> None:
    for package in ("domain", "projections", "infra"):
        for module in (ROOT / package).rglob("*.py"):
            assert not {"cli", "commands"} & imported_top_levels(module), module
