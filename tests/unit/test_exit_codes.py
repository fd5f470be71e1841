"""The exit-code table of docs/exit-codes.md is generated from the errors, and the command line keeps to it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import cli
from infra.exit_codes import ERROR_MODULES, error_classes, with_exit_code_table
from tests.support.cli import run_cli

EXIT_CODES = Path(__file__).resolve().parents[2] / "docs" / "exit-codes.md"


def test_the_exit_codes_page_lists_every_exit_code_as_declared() -> None:
    page = EXIT_CODES.read_text()

    assert page == with_exit_code_table(page), (
        "docs/exit-codes.md's table is out of date: run `python -m infra.exit_codes docs/exit-codes.md`"
    )


def test_every_error_with_an_exit_code_is_declared_where_the_table_looks() -> None:
    # cli imports every command, and so every error the program can raise.
    declared_elsewhere = [
        f"{error.__module__}.{error.__name__}" for error in error_classes()
        if sys.modules[error.__module__] not in ERROR_MODULES and not error.__module__.startswith("tests")
    ]

    assert declared_elsewhere == [], "add their module to infra.exit_codes.ERROR_MODULES"


def test_a_usage_error_exits_2() -> None:
    assert run_cli({}, "reset", "request", "--no-such-option").exit_code == 2


def test_an_internal_error_exits_70_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(**_: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "cli", broken)
    monkeypatch.delenv("AUTHLEDGER_DEBUG", raising=False)

    with pytest.raises(SystemExit) as exited:
        cli.main()

    assert exited.value.code == 70
    assert capsys.readouterr().err.splitlines() == [
        "Error: internal error (RuntimeError); rerun with AUTHLEDGER_DEBUG=1 for details"
    ]
