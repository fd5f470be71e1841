"""Appliers: fold pages of the log into projection tables, many rows per statement.

An applier holds a projection's pure fold and the table(s) it writes. The
same applier folds into the live tables (the catch-up runner), into shadow
tables (rebuild), temporary tables (verify) or a side schema (replay):
``on`` points it at other tables of the same shape. ``fold`` does the same
work in memory, for tests that compare a table with a replay of the log.

Rows go out through one ``INSERT ... SELECT FROM unnest(...)`` per page
rather than one statement per row: a rebuild writes hundreds of thousands.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import attrs
from sqlalchemy import Connection, Table, TextClause, text
from sqlalchemy.dialects import postgresql

from domain.log import RecordedEvent
from infra.db.pipeline import Pending, execute_deferred, execute_read

_DIALECT = postgresql.dialect()
_QUOTE = _DIALECT.identifier_preparer
WAIT_FOR_ROW_LOCK = text("SELECT pg_advisory_xact_lock(:key)")


def qualified_name(table: Table) -> str:
    """The quoted, schema-qualified name of a table described in code (never user input)."""
    return _QUOTE.format_table(table)


def _array_type(table: Table, column: str) -> str:
    return f"{table.c[column].type.compile(dialect=_DIALECT)}[]"


def _unnest_insert(table: Table, conflict: str) -> TextClause:
    columns = [c.name for c in table.columns]
    names = ", ".join(_QUOTE.quote(c) for c in columns)
    arrays = ", ".join(f"CAST(:c{i} AS {_array_type(table, c)})" for i, c in enumerate(columns))
    return text(f"INSERT INTO {qualified_name(table)} ({names}) SELECT * FROM unnest({arrays}) {conflict}")


def _values_upsert(table: Table, key_column: str) -> Any:
    statement = postgresql.insert(table)
    updates = {c.name: statement.excluded[c.name] for c in table.c if c.name != key_column}
    return statement.on_conflict_do_update(index_elements=[key_column], set_=updates)


def _columns_params(table: Table, rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    return {f"c{i}": [row[c.name] for row in rows] for i, c in enumerate(table.columns)}


@contextlib.contextmanager
def bulk_folding() -> Iterator[None]:
    """Fewer garbage collections while folding a whole log (rebuild, verify, replay).

    Decoding and folding allocate millions of short-lived objects, nearly all
    freed by reference counting; the default threshold runs a collection every
    700 allocations for nothing. This saves about a sixth of the CPU. Not for
    long-running threads (the catch-up runner): the setting is per process.
    """
    before = gc.get_threshold()
    gc.set_threshold(50_000, before[1], before[2])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def retarget(table: Table, name: str, schema: str | None = None) -> Table:
    """A description of another table with ``table``'s columns, for shadow and side tables."""
    from sqlalchemy import MetaData

    # schema=None (the new MetaData's, none) is documented, but to_metadata's annotation leaves None out.
    return table.to_metadata(MetaData(), name=name, schema=schema)  # type: ignore[arg-type]


class Staged:
    """Many rows at once: COPY into a temporary table, then one INSERT ... SELECT ... ON CONFLICT.

    COPY formats rows in C; a rebuild writes hundreds of thousands, where
    adapting them to arrays for ``unnest`` would cost more than folding them.
    The temporary table lives as long as the session and is emptied after use.
    """

    WORTH_IT = 500  # rows; below this one unnest statement is as quick

    def __init__(self, table: Table, conflict: str) -> None:
        names = ", ".join(_QUOTE.quote(c.name) for c in table.columns)
        stage = _QUOTE.quote(f"stage_{table.schema or 'public'}_{table.name}"[:63])
        self._create = (f"CREATE TEMPORARY TABLE IF NOT EXISTS {stage} "
                        f"(LIKE {qualified_name(table)} INCLUDING DEFAULTS) ON COMMIT DELETE ROWS")
        self._copy = f"COPY {stage} ({names}) FROM STDIN"
        self._insert = f"INSERT INTO {qualified_name(table)} ({names}) SELECT {names} FROM {stage} {conflict}"
        self._empty = f"TRUNCATE {stage}"

    def write(self, connection: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
        driver = connection.connection.driver_connection
        assert driver is not None  # a connection in a transaction has its driver's
        cursor = driver.cursor()  # the same transaction, psycopg's COPY
        try:
            cursor.execute(self._create)
            with cursor.copy(self._copy) as copy:
                for row in rows:
                    copy.write_row(row)
            cursor.execute(self._insert)
            cursor.execute(self._empty)
        finally:
            cursor.close()


class Applier(Protocol):
    tables: tuple[Table, ...]

    def apply(self, connection: Connection, recorded: Sequence[RecordedEvent]) -> int:
        """Fold a page of events into the tables; the caller owns the transaction."""
        ...

    def fold(self, recorded: Iterable[RecordedEvent]) -> dict[str, list[dict[str, Any]]]:
        """The rows of each table after ``recorded``, computed in memory."""
        ...

    def on(self, tables: Mapping[str, Table], *, cache_rows: int = 0) -> Applier:
        """The same fold into tables of its own (shadow, temporary, side schema), keyed by the live name.

        Such an applier is the only writer of its tables, may remember
        ``cache_rows`` rows between pages, and writes large pages with COPY.
        """
        ...

    def forget(self) -> None:
        """Forget any rows remembered from a transaction that rolled back."""
        ...


@attrs.frozen
class Asked:
    """Rows asked for ahead (``KeyedApplier.ask``): the keys, and their answer once a statement has waited."""

    keys: list[Any]
    rows: Pending


# Below this many rows (an inline fold writes one to ten) a plain upsert of
# the rows costs the client less than adapting every column to an array:
# with unnest alone the outbox's claim and record lost about 4% of throughput.
FEW_ROWS = 50


def _row_lock_id(table: str, key: Any) -> int:
    """A signed 64-bit digest of (table, key): an advisory lock id apart from the services' (scope "row")."""
    scope = json.dumps(["row", table, str(key)])
    return int.from_bytes(hashlib.sha256(scope.encode("utf-8")).digest()[:8], "big", signed=True)


class KeyedApplier:
    """One row per key: ``evolve(row | None, event) -> row | None`` over the events ``key_of`` names.

    The one class that folds events into a table, inline and after the fact.
    With ``lock`` it reads the rows it folds ``FOR UPDATE``: an inline
    projection, folded in the transaction that appends, so that two writers
    of one row take turns. With ``cache_rows`` it remembers the rows it wrote
    last, which is only right while nobody else writes the table: a
    rebuild's shadow tables. With ``bulk`` it writes large pages through COPY
    and a temporary table (rebuild, verify, replay, on the login role); the
    catch-up runner and inline folds, on the application role, always write
    with one statement.

    ``starts`` names the event classes that make their key's row whole,
    whatever row was there (``evolve(row, event) == evolve(None, event)``; a
    property test holds each applier to it): a key whose first event in a
    batch is one of them is not read, since its row could not change the
    result. A new message, request or receipt id then costs one upsert and
    no select; the upsert still takes the row's lock if the row exists.

    ``shared_keys`` is for an inline projection whose row writers of
    different streams may create at once (a user's address index, written
    by their reset and their OTP creates, which do not wait for each
    other): ``FOR UPDATE`` locks only a row that is there, so two first
    writers would each fold from nothing and the last would win. Each key's
    advisory lock is taken first, in a statement of its own, so the read
    after it sees the row the other writer committed.
    """

    def __init__(
        self, table: Table, row_type: type, key_column: str, key_of: Callable[[object], Any],
        evolve: Callable[[Any, object], Any], *, cache_rows: int = 0, bulk: bool = False, lock: bool = False,
        starts: tuple[type, ...] = (), shared_keys: bool = False,
    ) -> None:
        self.table, self.row_type, self.key_column = table, row_type, key_column
        self.key_of, self.evolve, self.starts = key_of, evolve, starts
        self.tables: tuple[Table, ...] = (table,)
        self.cache_rows, self.bulk, self.lock = cache_rows, bulk, lock
        self.shared_keys = shared_keys and lock
        self._cache: OrderedDict[Any, Any] = OrderedDict()
        key = _QUOTE.quote(key_column)
        names = ", ".join(_QUOTE.quote(c.name) for c in table.columns)
        locking = " FOR UPDATE" if lock else ""
        self._load = text(f"SELECT {names} FROM {qualified_name(table)} "
                          f"WHERE {key} = ANY(CAST(:keys AS {_array_type(table, key_column)})){locking}")
        # One key, the usual case inline, as a scalar: PostgreSQL caches a generic plan for it, where it
        # plans the array form on every call.
        self._load_one = text(f"SELECT {names} FROM {qualified_name(table)} WHERE {key} = :key{locking}")
        updates = ", ".join(f"{_QUOTE.quote(c.name)} = EXCLUDED.{_QUOTE.quote(c.name)}"
                            for c in table.columns if c.name != key_column)
        conflict = f"ON CONFLICT ({key}) DO UPDATE SET {updates}"
        self._upsert = _unnest_insert(table, conflict)
        self._upsert_few = _values_upsert(table, key_column)
        self._staged = Staged(table, conflict)

    def on(self, tables: Mapping[str, Table], *, cache_rows: int = 0) -> KeyedApplier:
        return KeyedApplier(tables[self.table.name], self.row_type, self.key_column, self.key_of, self.evolve,
                            cache_rows=cache_rows, bulk=True, starts=self.starts)

    def _step(self, rows: dict[Any, Any], recorded: Iterable[RecordedEvent]) -> dict[Any, Any]:
        changed = {}
        for r in recorded:
            key = self.key_of(r.event)
            if key is None:
                continue
            before = rows.get(key)
            row = self.evolve(before, r.event)
            if row is not None:
                rows[key] = row
                if row != before:  # a row the event leaves as it was (a known address) is not written again
                    changed[key] = row
        return changed

    def fold(self, recorded: Iterable[RecordedEvent]) -> dict[str, list[dict[str, Any]]]:
        rows = self._step({}, recorded)
        return {self.table.name: [attrs.asdict(row, recurse=False) for row in rows.values()]}

    @property
    def name(self) -> str:
        return self.table.name

    def load(self, connection: Connection, keys: Iterable[Any]) -> dict[Any, Any]:
        """The rows of these keys that exist, by key (locked when the applier locks)."""
        keys = list(keys)
        self._lock_keys(connection, keys)
        return self._by_key(execute_read(connection, *self._load_of(keys)))

    def _lock_keys(self, connection: Connection, keys: Sequence[Any]) -> None:
        """With ``shared_keys``, wait for each key's advisory lock, in one order, before its row is read."""
        if self.shared_keys:
            for lock_id in sorted({_row_lock_id(self.table.name, key) for key in keys}):
                execute_deferred(connection, WAIT_FOR_ROW_LOCK, {"key": lock_id})

    def _load_of(self, keys: list[Any]) -> tuple[TextClause, dict[str, Any]]:
        """The statement that reads (and locks) these keys' rows, and its parameters."""
        return (self._load_one, {"key": keys[0]}) if len(keys) == 1 else (self._load, {"keys": keys})

    def _by_key(self, found: Iterable[Any]) -> dict[Any, Any]:
        return {row[self.key_column]: self.row_type(**row) for row in (row._asdict() for row in found)}

    def ask(
        self, connection: Connection, events: Sequence[object], loaded: dict[Any, Any] | None = None,
    ) -> Asked | None:
        """Ask ahead for the rows ``apply`` will read for these events, sent with the next statement that
        waits (the append that records them): their answer comes with its own, with no wait of their own."""
        missing = self._missing(self._first_events(events), loaded or {})
        if not missing:
            return None
        self._lock_keys(connection, missing)
        return Asked(missing, execute_deferred(connection, *self._load_of(missing), answer=True))

    def _first_events(self, events: Iterable[object]) -> dict[Any, object]:
        """Each key's first event, in log order."""
        first: dict[Any, object] = {}
        for event in events:
            if (key := self.key_of(event)) is not None:
                first.setdefault(key, event)
        return first

    def _missing(self, first: Mapping[Any, object], rows: Mapping[Any, Any]) -> list[Any]:
        """The keys that must be read: neither known already nor made whole by their first event."""
        return [key for key, event in first.items()
                if key not in rows and key not in self._cache and not isinstance(event, self.starts)]

    def apply(
        self, connection: Connection, recorded: Sequence[RecordedEvent], *, loaded: dict[Any, Any] | None = None,
        asked: Asked | None = None,
    ) -> int:
        """Fold ``recorded`` into the table; the number of rows written.

        ``loaded`` holds rows the caller already read (and locked) by key:
        they are folded instead of read again, and updated in place with the
        rows written, so the caller sees the result without folding twice.
        Keys whose first event ``starts`` their row are not read; the others
        come from ``asked`` (``ask``, before the append) or are read now.
        """
        first = self._first_events(r.event for r in recorded)
        if not first:
            return 0
        rows = loaded if loaded is not None else {}
        rows.update((key, self._cache[key]) for key in first if key in self._cache and key not in rows)
        missing = self._missing(first, rows)
        if asked is not None and asked.keys == missing:
            rows.update(self._by_key(asked.rows.all()))
        elif missing:
            rows.update(self.load(connection, missing))
        try:
            changed = self._step(rows, recorded)
            if self.bulk and len(changed) >= Staged.WORTH_IT:
                self._staged.write(connection, [attrs.astuple(row, recurse=False) for row in changed.values()])
            elif changed:
                values = [attrs.asdict(row, recurse=False) for row in changed.values()]
                if len(values) >= FEW_ROWS:
                    execute_deferred(connection, self._upsert, _columns_params(self.table, values))
                else:
                    execute_deferred(connection, self._upsert_few, values if len(values) > 1 else values[0])
        except BaseException:
            self._cache.clear()  # the transaction will not commit: forget what it would have written
            raise
        self._remember(changed)
        return len(changed)

    def _remember(self, changed: Mapping[Any, Any]) -> None:
        if not self.cache_rows:
            return
        for key, row in changed.items():
            self._cache[key] = row
            self._cache.move_to_end(key)
        while len(self._cache) > self.cache_rows:
            self._cache.popitem(last=False)

    def forget(self) -> None:
        """Drop the cache, after a transaction that wrote through it rolled back."""
        self._cache.clear()


class EntriesApplier:
    """Insert-only rows derived from each event alone (the audit index)."""

    def __init__(self, table: Table, entries_of: Callable[[RecordedEvent], Iterable[Any]]) -> None:
        self.table, self.entries_of = table, entries_of
        self.tables: tuple[Table, ...] = (table,)
        # No ON CONFLICT: an event applied twice must fail loudly, not vanish.
        self._insert = _unnest_insert(table, "")

    def on(self, tables: Mapping[str, Table], *, cache_rows: int = 0) -> EntriesApplier:
        return EntriesApplier(tables[self.table.name], self.entries_of)

    def fold(self, recorded: Iterable[RecordedEvent]) -> dict[str, list[dict[str, Any]]]:
        return {self.table.name: [attrs.asdict(e, recurse=False) for r in recorded for e in self.entries_of(r)]}

    def apply(self, connection: Connection, recorded: Sequence[RecordedEvent]) -> int:
        values = [attrs.asdict(e, recurse=False) for r in recorded for e in self.entries_of(r)]
        if values:
            connection.execute(self._insert, _columns_params(self.table, values))
        return len(values)

    def forget(self) -> None:
        pass
