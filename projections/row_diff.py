"""Comparing a projection's rows with the rows a replay of the log produces.

Both sides arrive sorted by primary key (PostgreSQL sorts text with
``COLLATE "C"``, which is Python's order for ``str``), so the comparison is a
merge that holds one row of each side at a time, however large the tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from attrs import frozen

Row = Mapping[str, Any]


@frozen
class RowDifference:
    table: str
    key: dict[str, Any]
    kind: str  # "missing" (the log says it exists), "unexpected" (the log knows nothing of it) or "changed"
    # column -> (live value, value in a replay of the log); only the columns that differ
    columns: dict[str, tuple[Any, Any]]

    def describe(self) -> str:
        key = ", ".join(f"{name}={_show(value)}" for name, value in self.key.items())
        if self.kind == "missing":
            return f"{self.table} [{key}]: missing from the live table, but a replay of the log has it"
        if self.kind == "unexpected":
            return f"{self.table} [{key}]: in the live table, but a replay of the log has no such row"
        changes = "; ".join(f"{name}: live {_show(live)} != replay {_show(replay)}"
                            for name, (live, replay) in self.columns.items())
        return f"{self.table} [{key}]: {changes}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table, "kind": self.kind, "key": {k: _show(v) for k, v in self.key.items()},
            "columns": {c: {"live": _show(a), "replay": _show(b)} for c, (a, b) in self.columns.items()},
        }


def _show(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    return str(value)


def diff_rows(
    table: str, key_columns: Sequence[str], live: Iterable[Row], replay: Iterable[Row],
) -> Iterator[RowDifference]:
    """Every difference between two row streams sorted by ``key_columns``."""

    def key_of(row: Row) -> tuple[Any, ...]:
        return tuple(row[c] for c in key_columns)

    live_rows, replay_rows = iter(live), iter(replay)
    a, b = next(live_rows, None), next(replay_rows, None)
    while a is not None or b is not None:
        if b is None or (a is not None and key_of(a) < key_of(b)):
            assert a is not None
            yield RowDifference(table, dict(zip(key_columns, key_of(a), strict=True)), "unexpected", {})
            a = next(live_rows, None)
        elif a is None or key_of(b) < key_of(a):
            yield RowDifference(table, dict(zip(key_columns, key_of(b), strict=True)), "missing", {})
            b = next(replay_rows, None)
        else:
            changed = {c: (a[c], b[c]) for c in b if a.get(c) != b[c]}
            if changed:
                yield RowDifference(table, dict(zip(key_columns, key_of(a), strict=True)), "changed", changed)
            a, b = next(live_rows, None), next(replay_rows, None)


def sorted_rows(rows: Iterable[Row], key_columns: Sequence[str]) -> list[Row]:
    return sorted(rows, key=lambda row: tuple(row[c] for c in key_columns))
