"""What a piece of code sends the database: every statement's SQL, counted at the cursor."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, event


@contextmanager
def statements_sent(target: Engine | Connection) -> Iterator[list[str]]:
    """The SQL of each statement sent through ``target`` (an engine, or one connection) while the block runs."""
    sent: list[str] = []

    def note(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        sent.append(statement)

    event.listen(target, "before_cursor_execute", note)
    try:
        yield sent
    finally:
        event.remove(target, "before_cursor_execute", note)
