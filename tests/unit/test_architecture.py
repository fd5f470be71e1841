"""Dependencies point inward and downward, and nothing imports in a circle.

domain <- projections <- infra <- commands <- cli; inside infra/, each room
imports only the rooms below it (the layers in pyproject.toml's
[tool.importlinter]). The contracts are checked on the real tree, and on a
copy of it with a violation planted, to show that they would catch one.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.cli import process_env

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("domain", "projections", "infra", "commands")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(project: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """Run import-linter on ``project`` with its own packages first on the path."""
    env = process_env({"PYTHONPATH": str(project)})
    return subprocess.run([str(LINT_IMPORTS), "--no-logo", *extra], cwd=project, env=env,
                          capture_output=True, text=True)


@pytest.fixture
def project_copy(tmp_path: Path) -> Path:
    """The project's packages and import contracts, copied where a test may break them."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def plant(project: Path, module: str, line: str) -> None:
    """Append ``line`` to ``module`` (a path relative to the project), creating it if needed."""
    path = project / module
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as file:
        file.write(f"\n{line}\n")


def test_the_import_contracts_hold() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("module", "line", "named"),
    [
        ("infra/db/engine.py", "import infra.http.app", "infra.db.engine -> infra.http.app"),
        ("infra/eventlog/reader.py", "import infra.projector.status",
         "infra.eventlog.reader -> infra.projector.status"),
        ("infra/config/settings.py", "import infra.db.engine", "infra.config.settings -> infra.db.engine"),
        ("infra/delivery/status.py", "import infra.review.timeline", "infra.delivery.status -> infra.review.timeline"),
        ("domain/log.py", "import infra.clock", "domain.log -> infra.clock"),
        ("projections/outbox.py", "import commands.output", "projections.outbox -> commands.output"),
    ],
)
def test_an_import_against_the_layers_breaks_a_contract_and_is_named(
    project_copy: Path, module: str, line: str, named: str
) -> None:
    plant(project_copy, module, line)
    result = lint_imports(project_copy)
    assert result.returncode == 1
    assert named in result.stdout, result.stdout


def test_a_new_folder_in_infra_must_be_given_its_layer(project_copy: Path) -> None:
    plant(project_copy, "infra/webhooks/__init__.py", '"""Somewhere new."""')
    result = lint_imports(project_copy)
    assert result.returncode == 1
    assert "not listed as layers:\n\n- infra.webhooks" in result.stdout, result.stdout


@pytest.mark.parametrize(
    ("module", "line", "named"),
    [
        # codec.py imports tags.py; an import hidden inside a function still closes the circle.
        ("infra/eventlog/tags.py", "def _late():\n    import infra.eventlog.codec", "infra.eventlog"),
        ("domain/email.py", "import domain.decisions", "domain"),  # decisions.py imports email.py
        ("commands/output.py", "import commands.outbox", "commands"),  # and outbox.py imports output.py
    ],
)
def test_an_import_cycle_breaks_the_no_cycles_contract_and_is_named(
    project_copy: Path, module: str, line: str, named: str
) -> None:
    plant(project_copy, module, line)
    result = lint_imports(project_copy)
    assert result.returncode == 1
    assert f"No cycles are allowed in {named}." in result.stdout, result.stdout


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
