"""One write path and one owner of the log's SQL, checked by reading the source.

Every append goes through the unit of work, which folds the inline
projections in the same transaction: an append anywhere else could leave a
read model behind the log. Only the event log (and the sealer, which hashes
it) writes SQL against ``events``, so a change to the table is checked in one
folder (schema.sql, which creates it, is not Python and not scanned). Tests and
benches are not scanned: they append and count on purpose.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("infra", "commands", "domain", "projections", "cli.py")
STORE_CLASSES = {"PostgresEventStore", "InMemoryEventStore", "EventStore"}
STORE_MODULES = {"infra/eventlog/postgres.py", "infra/eventlog/memory.py",  # the stores themselves
                 "infra/eventlog/email_leases.py"}
UNIT_OF_WORK = "infra/services/unit_of_work.py"
# The delivery hot path's set-based writes (infra/eventlog/email_leases.py):
# each appends and folds in one statement, and counts as an append.
SET_BASED_APPENDS = {"claim_due_leases", "append_fenced"}
LOG_SQL_FOLDERS = ("infra/eventlog/", "infra/audit/")
# db sits below eventlog and may not import it; its schema check reads the
# highest transaction id of the table schema.sql creates (the restore check).
LOG_SQL_EXCEPTIONS = {"infra/db/schema.py"}
FROM_EVENTS = re.compile(r"\bfrom\s+events\b", re.IGNORECASE)


def _is_store(node: ast.expr, stores: set[str]) -> bool:
    """A store built in place (``PostgresEventStore(c)``) or a name bound to or annotated as one."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id in STORE_CLASSES
    return isinstance(node, ast.Name) and node.id in stores


def _store_names(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _is_store(node.value, set()):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        elif isinstance(node, (ast.AnnAssign, ast.arg)):
            annotation = node.annotation
            target = node.target if isinstance(node, ast.AnnAssign) else node
            named = annotation is not None and any(cls in ast.unparse(annotation) for cls in STORE_CLASSES)
            if named and isinstance(target, (ast.Name, ast.arg)):
                names.add(target.id if isinstance(target, ast.Name) else target.arg)
    return names


def store_append_lines(source: str) -> list[int]:
    """The lines of ``source`` that call an event store's ``append`` or ``append_many``, or a set-based append."""
    tree = ast.parse(source)
    stores = _store_names(tree)
    return sorted(
        node.lineno for node in ast.walk(tree)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and (node.func.attr == "append_many"
             or (node.func.attr == "append" and _is_store(node.func.value, stores))))
        or (isinstance(node, ast.Call) and _called_name(node.func) in SET_BASED_APPENDS)
    )


def _called_name(func: ast.expr) -> str | None:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def log_sql_lines(source: str) -> list[int]:
    """The lines of ``source`` that name ``FROM events``, in any case."""
    return [n for n, line in enumerate(source.splitlines(), start=1) if FROM_EVENTS.search(line)]


def _sources() -> dict[str, str]:
    files = []
    for name in SCANNED:
        path = ROOT / name
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return {file.relative_to(ROOT).as_posix(): file.read_text() for file in files}


def test_the_event_store_is_appended_to_only_by_the_unit_of_work() -> None:
    appending = {path: lines for path, source in _sources().items() if (lines := store_append_lines(source))}
    assert UNIT_OF_WORK in appending, "the scan must find the unit of work's own append"
    outside = {path: lines for path, lines in appending.items() if path not in {UNIT_OF_WORK, *STORE_MODULES}}
    assert outside == {}, "append through infra.services.unit_of_work.append_and_fold instead"


def test_sql_over_the_events_table_is_written_only_in_the_event_log_and_the_sealer() -> None:
    querying = {path: lines for path, source in _sources().items() if (lines := log_sql_lines(source))}
    assert "infra/eventlog/postgres.py" in querying and "infra/audit/seal.py" in querying, "the scan must see them"
    outside = {path: lines for path, lines in querying.items()
               if not path.startswith(LOG_SQL_FOLDERS) and path not in LOG_SQL_EXCEPTIONS}
    assert outside == {}, "name the query in infra/eventlog/ (queries.py) and call it"


def test_a_planted_append_or_log_query_outside_the_event_log_is_caught() -> None:
    planted = (
        "def record(connection, events, store: PostgresEventStore):\n"
        "    PostgresEventStore(connection).append('email:x', 0, events)\n"
        "    mine = InMemoryEventStore()\n"
        "    mine.append('email:y', 0, events)\n"
        "    store.append('email:z', 0, events)\n"
        "    whatever.append_many([('email:w', 0, events)])\n"
        "    events.append(object())  # a list: not a store\n"
        "    email_leases.claim_due_leases(connection, owner='w')\n"
        "    return text('select count(*) from  Events')\n"
    )
    assert store_append_lines(planted) == [2, 4, 5, 6, 8]
    assert log_sql_lines(planted) == [9]
    assert log_sql_lines("# read from eventsourcing's docs\nQ = 'SELECT FROM event_types'") == []
