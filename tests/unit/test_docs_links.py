"""The README and docs/ link where they say: every relative link reaches a file, every anchor a heading.

The README is a guide that sends the reader on to docs/; a page that moves or
a heading that is reworded must not leave a link pointing at nothing. Anchors
follow GitHub's rule for heading ids (lower case, punctuation dropped, spaces
to hyphens, a repeated heading numbered). Links inside code blocks and
inline code are text, not links. The code names docs pages in its messages
and comments too (``docs/limits.md``); those must exist as well.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*```")
INLINE_CODE = re.compile(r"(`+).*?\1")
CODE_DIRS = ("domain", "projections", "infra", "commands", "tests")


def prose(page: Path) -> str:
    """The page without its fenced blocks and inline code."""
    kept, fenced = [], False
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        kept.append("" if fenced else line)
    return INLINE_CODE.sub("", "\n".join(kept))


def anchors(page: Path) -> set[str]:
    """The ids GitHub gives the headings of ``page``."""
    seen: dict[str, int] = {}
    ids = set()
    fenced = False
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        if fenced or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip().lower()
        slug = re.sub(r"\s", "-", re.sub(r"[^\w\- ]", "", title))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        ids.add(slug if count == 0 else f"{slug}-{count}")
    return ids


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(prose(page)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_relative_link_reaches_a_file_and_every_anchor_a_heading(page: Path) -> None:
    assert broken_links(page) == []


def test_the_readme_leads_to_every_page_of_docs() -> None:
    linked = {target.partition("#")[0] for target in LINK.findall(prose(ROOT / "README.md"))}

    assert [page.name for page in PAGES[1:] if f"docs/{page.name}" not in linked] == []


def test_every_docs_page_the_code_names_exists() -> None:
    sources = [path for folder in CODE_DIRS for path in (ROOT / folder).rglob("*.py")]
    sources += [ROOT / "cli.py", ROOT / "dev.py"]
    named = {(source.relative_to(ROOT), name) for source in sources
             for name in re.findall(r"docs/([\w.-]+\.md)", source.read_text())}

    assert sorted(f"{source} names docs/{name}" for source, name in named if not (ROOT / "docs" / name).exists()) == []


def test_a_link_to_a_missing_page_or_heading_is_reported(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## Keys, and rotation\n")
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n[ok](other.md#keys-and-rotation) [gone](missing.md) [moved](other.md#keys)\n"
                    "[here](#page) `[in code](nowhere.md)`\n\n```\n[in a block](nowhere.md)\n```\n")

    assert broken_links(page) == ["missing.md: no such file", "other.md#keys: no heading #keys in other.md"]
