"""Where the case timeline puts its marks and their labels, so that none covers another.

Time gives each mark its x; events close in time (two wrong codes and the
right one within a second, a failed attempt and the abandonment it caused)
would be drawn on top of one another. ``place`` keeps every mark at its x
and stacks it instead: each lane has rows, and a mark takes the first row
where it and its label fit beside what is already there. A label is written
right of its mark, or left of it when the right would run out of the
picture.

Widths are known without a browser: every label is drawn with
``textLength`` set to ``label_width``, so the browser draws it exactly as
wide as it was placed.

Pure: numbers in, numbers out.
"""

from __future__ import annotations

from attrs import frozen

CHAR = 6.0  # the width given to a character of a label (10px text), narrower or wider for these:
NARROW, WIDE = set("ijlrtf.,:;!'()[]| 1"), set("mwMW@%")
GAP = 4.0  # between a mark and its label
SPACE = 6.0  # between two marks' extents in one row
LONGEST = 30  # characters a label keeps; the hover title has it all


@frozen
class Mark:
    """A point shape to place: its lane, the x that time gives it, half its width, and its label."""

    lane: int
    x: float
    half: float
    label: str


@frozen
class Placed:
    """Where ``place`` put a mark: its row in its lane, the side of its label, and what it all covers in x."""

    row: int
    label_right: bool
    left: float
    right: float

    def label_x(self, mark: Mark) -> float:
        """Where the label's text starts (right of the mark) or ends (left of it)."""
        return round(mark.x + mark.half + GAP if self.label_right else mark.x - mark.half - GAP, 1)


def short_label(text: str) -> str:
    return text if len(text) <= LONGEST else text[:LONGEST - 1] + "…"


def label_width(label: str) -> float:
    """About as wide as 10px sans-serif draws ``label``; the label is then drawn exactly this wide."""
    return round(sum(CHAR * (0.55 if c in NARROW else 1.5 if c in WIDE else 1.0) for c in label), 1)


def place(marks: list[Mark], *, left: float, right: float) -> list[Placed]:
    """Each mark's place (in the order given): rows stacked per lane, none covering another, all within x bounds.

    Marks are taken in order of time (then as given), so the earliest of a pile keeps the first row.
    """
    rows: dict[tuple[int, int], list[tuple[float, float]]] = {}
    placed: dict[int, Placed] = {}
    for index in sorted(range(len(marks)), key=lambda i: (marks[i].lane, marks[i].x, i)):
        mark = marks[index]
        width = label_width(mark.label) + GAP if mark.label else 0.0
        label_right = mark.x + mark.half + width <= right or mark.x - mark.half - width < left
        start = mark.x - mark.half - (0.0 if label_right else width)
        end = mark.x + mark.half + (width if label_right else 0.0)
        row = 0
        while any(start < taken_end + SPACE and taken_start < end + SPACE
                  for taken_start, taken_end in rows.get((mark.lane, row), [])):
            row += 1
        rows.setdefault((mark.lane, row), []).append((start, end))
        placed[index] = Placed(row, label_right, start, end)
    return [placed[index] for index in range(len(marks))]


def rows_of(marks: list[Mark], placed: list[Placed], lanes: int) -> list[int]:
    """How many rows each lane needs (at least one)."""
    counts = [1] * lanes
    for mark, where in zip(marks, placed, strict=True):
        counts[mark.lane] = max(counts[mark.lane], where.row + 1)
    return counts
