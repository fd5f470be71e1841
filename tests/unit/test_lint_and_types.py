"""ruff and mypy check what pyproject.toml says, and a finding stops ``dev.py test`` before any test runs.

``dev.py test`` runs both on the real tree. Here findings are planted in a
small copy, to show each would be caught: an annotation naming a type never
imported (how ``UUID`` hid in infra/delivery/fresh.py: annotations are not
evaluated at run time); a function without annotations, refused in the pure
core (domain/, strict) and accepted in infra/; and a wrong call inside such a
function, which infra/'s check_untyped_defs still finds.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NOT_IMPORTED = "from __future__ import annotations\n\n\ndef first(ids: list[UUID]) -> UUID:\n    return ids[0]\n"
UNANNOTATED = "def double(n):\n    return n * 2\n"
WRONG_CALL_UNANNOTATED = "def size():\n    return len(5)\n"


def run(tool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / tool), *args], cwd=cwd, capture_output=True, text=True)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An empty domain/ and infra/ under the project's own pyproject.toml."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for package in ("domain", "infra"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    return tmp_path


def test_ruff_finds_a_type_named_in_an_annotation_but_never_imported(project: Path) -> None:
    (project / "infra" / "planted.py").write_text(NOT_IMPORTED)
    found = run("ruff", "check", "--no-cache", "--output-format", "concise", ".", cwd=project)
    assert found.returncode == 1
    assert "infra/planted.py:4:21: F821 Undefined name `UUID`" in found.stdout


def mypy(project: Path, *files: str) -> subprocess.CompletedProcess[str]:
    return run("mypy", "--cache-dir", "/dev/null", *files, cwd=project)


def test_mypy_refuses_an_unannotated_function_in_domain_only(project: Path) -> None:
    for package in ("domain", "infra"):
        (project / package / "planted.py").write_text(UNANNOTATED)
    found = mypy(project, "domain/planted.py", "infra/planted.py")
    assert found.returncode == 1
    assert "domain/planted.py:1: error: Function is missing a type annotation  [no-untyped-def]" in found.stdout
    assert "infra/planted.py" not in found.stdout


def test_mypy_checks_the_body_of_an_unannotated_function_in_infra(project: Path) -> None:
    (project / "infra" / "planted.py").write_text(WRONG_CALL_UNANNOTATED)
    found = mypy(project, "infra/planted.py")
    assert found.returncode == 1
    assert "infra/planted.py:2: error: Argument 1 to \"len\" has incompatible type \"int\"" in found.stdout


def test_a_finding_stops_dev_py_test_before_pytest_with_the_tool_s_exit_code(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    (project / "infra" / "planted.py").write_text(NOT_IMPORTED)
    monkeypatch.syspath_prepend(str(ROOT))
    import dev

    monkeypatch.setattr(dev, "ROOT", project)
    monkeypatch.setattr(dev, "BIN", BIN)
    with pytest.raises(SystemExit) as stopped:
        dev.lint()
    assert stopped.value.code == 1
    said = capsys.readouterr().err
    assert "F821 Undefined name `UUID`" in said
    assert said.rstrip().endswith("dev.py: ruff failed (exit 1), so no test ran")
