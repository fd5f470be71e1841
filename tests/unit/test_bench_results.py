"""bench/RESULTS.md's table of today's figures, and the journal in bench/history/, lead where they say.

The table is kept by hand by whoever reruns a bench; these checks keep its commands runnable and its
links whole, so that a reader can reproduce a figure and find the run behind it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
RESULTS = BENCH / "RESULTS.md"
HISTORY = BENCH / "history"
JOURNALS = sorted(HISTORY.glob("issue-*.md"))

LINK = re.compile(r"\[[^\]]*\]\(([^)\s#]+)[^)]*\)")
COMMAND = re.compile(r"^`PYTHONPATH=\$PWD \.venv/bin/python (bench/\w+\.py)((?: [^`]*)?)`")
FLAG = re.compile(r"(?<!\S)(--[a-z][a-z-]*)")
DECLARED_FLAG = re.compile(r"add_argument\(\s*\"(--[a-z][a-z-]*)\"")
HEADING = re.compile(r"^#{2,4} (.+)$", re.MULTILINE)
STATUSES = ("met", "missed", "recorded", "pending (issue ")
COLUMNS = ["issue", "aim", "today's figure", "measured", "status", "command"]


def figures_table() -> tuple[list[str], list[list[str]]]:
    """The header and the rows of RESULTS.md's table, each row a list of its cells."""
    section = RESULTS.read_text().split("\n## Today's figures\n", 1)[1].split("\n## ", 1)[0]
    lines = [line.strip().strip("|") for line in section.splitlines() if line.startswith("|")]
    header, _rule, *rows = lines
    return [cell.strip() for cell in header.split("|")], [[cell.strip() for cell in row.split(" | ")] for row in rows]


def measured_rows() -> list[list[str]]:
    return [row for row in figures_table()[1] if not row[-1].startswith("pending")]


@pytest.mark.parametrize("page", [RESULTS, *HISTORY.glob("*.md")], ids=lambda page: page.name)
def test_every_link_leads_to_a_file(page: Path) -> None:
    targets = [target for target in LINK.findall(page.read_text()) if "://" not in target]

    assert targets, f"{page.name} links nowhere: it should lead to the journal or back to today's figures"
    assert [target for target in targets if not (page.parent / target).is_file()] == []


def test_the_table_gives_every_aim_its_figure_date_status_and_command() -> None:
    header, rows = figures_table()

    assert header == COLUMNS
    assert rows, "RESULTS.md's table has no rows"
    for row in rows:
        assert len(row) == len(COLUMNS) and all(row), f"a row with a missing cell: {row}"
        assert row[4].startswith(STATUSES), f"status {row[4]!r}: say met, missed, recorded or pending"


def test_every_measured_figure_links_to_the_journal_that_holds_its_run() -> None:
    for row in measured_rows():
        journals = [target for target in LINK.findall(row[3]) if target.startswith("history/issue-")]

        assert journals, f"the date of {row[1]!r} should link to its run in bench/history/"


def test_every_command_runs_a_bench_script_with_flags_that_script_takes() -> None:
    for row in measured_rows():
        command = COMMAND.match(row[-1])

        assert command, f"{row[-1]!r} is not `PYTHONPATH=$PWD .venv/bin/python bench/NAME.py ...`"
        script = BENCH.parent / command[1]
        assert script.is_file(), f"{command[1]} is not in the repository"
        flags = set(FLAG.findall(command[2]))
        assert flags <= set(DECLARED_FLAG.findall(script.read_text())), f"{command[1]} takes no {flags}"


def test_the_journal_index_lists_every_file_and_every_section_of_it() -> None:
    index = (HISTORY / "README.md").read_text()
    listed = {line.strip().removeprefix("- ") for line in index.splitlines() if line.lstrip().startswith("- ")}

    assert JOURNALS
    for journal in JOURNALS:
        assert f"]({journal.name})" in index, f"bench/history/README.md does not link {journal.name}"
        assert f"](history/{journal.name})" in RESULTS.read_text(), f"RESULTS.md does not link {journal.name}"
        missing = [title for title in HEADING.findall(journal.read_text()) if title not in listed]
        assert missing == [], f"bench/history/README.md does not list these sections of {journal.name}"
