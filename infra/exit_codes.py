"""The exit-code table of docs/exit-codes.md, generated from the errors' own ``exit_code``.

Every error a user can see maps itself to an exit code (domain/errors.py,
infra/errors.py, the providers' ``SendFailed``); the command line adds 0,
2 for a usage error (click) and 70 for an internal error (``cli.main``).
``python -m infra.exit_codes docs/exit-codes.md`` rewrites the table between its
markers, and a test fails when it is out of date.
"""

from __future__ import annotations

import sys
from pathlib import Path

import domain.errors
import infra.delivery.providers
import infra.errors
from domain.errors import AuthledgerError

TABLE_START, TABLE_END = "<!-- exit-codes:start -->", "<!-- exit-codes:end -->"
# The modules that declare errors; a test checks that no error elsewhere has an exit code of its own.
ERROR_MODULES = (domain.errors, infra.errors, infra.delivery.providers)
# Codes the command line itself uses, beside the errors' own.
COMMAND_LINE_CODES = (
    (0, "Success.", "-"),
    (2, "The command line is wrong: an unknown option, a missing argument (click's usage error).", "-"),
    (70, "An internal error (a bug): one line, and `AUTHLEDGER_DEBUG=1` shows the traceback.", "-"),
)


def error_classes() -> list[type[AuthledgerError]]:
    """Every error class loaded that declares its own exit code, root first."""
    found: list[type[AuthledgerError]] = []
    pending: list[type[AuthledgerError]] = [AuthledgerError]
    while pending:
        error = pending.pop(0)
        if "exit_code" in vars(error) and error not in found:
            found.append(error)
        pending += error.__subclasses__()
    return found


def exit_code_rows() -> list[tuple[int, str, str]]:
    """(exit code, when, error class) for every code, sorted by code, then name (not import order)."""
    rows = [
        (error.exit_code, (error.__doc__ or "").strip().splitlines()[0], f"`{error.__name__}`")
        for error in error_classes()
    ]
    return sorted([*COMMAND_LINE_CODES, *rows], key=lambda row: (row[0], row[2]))


def exit_code_table() -> str:
    lines = ["| Exit | When | Error |", "| --- | --- | --- |"]
    lines += [f"| {code} | {when} | {name} |" for code, when, name in exit_code_rows()]
    return "\n".join(lines)


def with_exit_code_table(page: str) -> str:
    """``page`` with the text between the exit-code markers replaced by a fresh table."""
    before, start, rest = page.partition(TABLE_START)
    _, end, after = rest.partition(TABLE_END)
    if not (start and end):
        raise ValueError(f"the page has no {TABLE_START} ... {TABLE_END} section")
    return f"{before}{start}\n{exit_code_table()}\n{end}{after}"


if __name__ == "__main__":
    # python -m infra.exit_codes docs/exit-codes.md: regenerate the exit-code table in place.
    page = Path(sys.argv[1])
    page.write_text(with_exit_code_table(page.read_text()))
