"""Every exit code an error carries is in docs/operations.md's table, and no two meanings share a new code."""

from __future__ import annotations

import re
from pathlib import Path

import domain.errors
import infra.delivery.providers
import infra.errors
from domain.errors import AuthledgerError

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def every_error_class(root: type = AuthledgerError) -> set[type]:
    found = set(root.__subclasses__())
    for sub in list(found):
        found |= every_error_class(sub)
    return found


def documented_codes() -> set[int]:
    table = DOCS.read_text().split("## Exit codes", 1)[1]
    return {int(code) for code in re.findall(r"^\| (\d+) \|", table, flags=re.MULTILINE)}


def test_every_exit_code_is_in_the_table() -> None:
    assert domain.errors and infra.errors and infra.delivery.providers  # imported: their classes are registered
    codes = {cls.exit_code for cls in every_error_class()} | {AuthledgerError.exit_code}
    assert codes - documented_codes() == set()


def test_the_codes_of_one_situation_are_not_shared() -> None:
    specific = {cls.__name__: cls.exit_code for cls in every_error_class() if 8 <= cls.exit_code <= 12}
    assert sorted(specific.values()) == sorted(set(specific.values())), specific
