"""Pipelined transactions: a write whose answer nobody reads travels with the next statement that is read.

A decision's transaction used to wait for PostgreSQL a dozen times: BEGIN,
the locks, the read, the append, each projection's row, COMMIT. When the
server runs on another core, each wait costs about 0.1 ms of wake-up alone
(bench/RESULTS.md), more than most of those statements take to run.
psycopg's pipeline mode sends statements without waiting for their answers;
the server still runs them one after another, in order, each under its own
snapshot, so nothing about what a statement sees changes.

Inside ``pipelined_transaction`` a statement run with ``connection.execute``
waits for its answer, as SQLAlchemy reads a cursor's description at once.
A write whose result is never read (an upsert, a lock taken only to wait)
goes through ``execute_deferred`` instead: compiled once, it is queued and
handed to psycopg, without SQLAlchemy's per-execute work, just before the
next statement that waits, inside that statement's execute. So BEGIN goes
with the first read and COMMIT with the last writes, and a reset request
waits four times where it waited twelve (tests/services/test_hot_path.py
counts them at the wire). A deferred statement that fails raises inside the
execute of the statement that waits next, where SQLAlchemy translates it as
any statement's error, and the transaction rolls back as it would have. A
deferred statement whose answer is read later (a try-lock) hands back a
``Pending`` answer, readable once that next wait is over.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any
from weakref import WeakKeyDictionary

import psycopg
from attrs import define, field, frozen
from psycopg.pq import PipelineStatus, TransactionStatus
from sqlalchemy import Connection, Dialect, Engine, event, text
from sqlalchemy.engine.interfaces import DBAPICursor, ExecutionContext
from sqlalchemy.sql import ClauseElement, TextClause

Params = Mapping[str, Any]
# Sent by us rather than by psycopg, which waits for its own BEGIN before
# the first statement and sends its COMMIT with a wait of its own.
_BEGIN = "BEGIN"
_COMMIT = text("COMMIT").execution_options(authledger_ends_pipeline=True)
_IDLE, _OFF = TransactionStatus.IDLE, PipelineStatus.OFF


class Pending:
    """The answer of a deferred statement, readable once a later statement has waited for the server."""

    def __init__(self) -> None:
        self._cursor: psycopg.Cursor[Any] | None = None
        self._answer: Any = None

    def scalar_one(self) -> Any:
        if self._cursor is not None:
            (self._answer,) = self._cursor.fetchall()[0]  # arrived with the sync of the statement that waited
            self._cursor = None
        return self._answer


@frozen
class _Compiled:
    statement: ClauseElement  # held, so that its id, the cache's key, is not reused
    sql: str
    processors: Mapping[str, Callable[[Any], Any]]  # the bind processors of typed parameters (JSONB, ...)

    def parameters(self, given: Params) -> Params:
        if not self.processors:
            return given
        return {name: (self.processors[name](value) if name in self.processors else value)
                for name, value in given.items()}


@frozen
class _Queued:
    compiled: _Compiled
    parameters: Params | Sequence[Params]
    pending: Pending | None


@define
class _Pipelined:
    pipeline: psycopg.Pipeline
    pipelining: AbstractContextManager[psycopg.Pipeline]
    queued: list[_Queued | str] = field(factory=list)


# Each driver connection in a pipelined transaction now: its pipeline, the context that ends it, and the
# deferred statements not sent yet. Only the thread that holds a connection touches its entry.
_PIPELINES: WeakKeyDictionary[psycopg.Connection[Any], _Pipelined] = WeakKeyDictionary()
# Deferred statements are module constants, so this stays as small as the code: (id, parameter names) -> SQL.
_COMPILED: dict[tuple[int, tuple[str, ...] | None], _Compiled] = {}


@contextmanager
def pipelined_transaction(engine: Engine) -> Iterator[Connection]:
    """A connection in a transaction that commits when the block ends, pipelined; rolled back if it raises."""
    _install(engine)
    with engine.connect() as connection:
        driver = connection.connection.driver_connection
        assert isinstance(driver, psycopg.Connection)
        # In autocommit psycopg sends no BEGIN of its own: ours is deferred,
        # and the transaction is still one block from BEGIN to COMMIT.
        driver.autocommit = True
        try:  # from here on, the connection goes back to the pool as it came, or closed
            pipelining = driver.pipeline()
            _PIPELINES[driver] = _Pipelined(pipelining.__enter__(), pipelining, [_BEGIN])
            yield connection
            # Ends the pipeline (see _execute): its closing sync carries the last writes and the COMMIT, and
            # what failed is raised inside SQLAlchemy's execute, translated as any statement's error is.
            connection.execute(_COMMIT)
        except BaseException as error:
            if (entry := _PIPELINES.pop(driver, None)) is not None:
                entry.pipelining.__exit__(type(error), error, error.__traceback__)  # logs, never raises, a 2nd error
            _roll_back(driver)
            raise
        finally:
            _hand_back(driver)
        connection.commit()  # ended already: SQLAlchemy's own bookkeeping, nothing is sent


def execute_deferred(
    connection: Connection, statement: ClauseElement, parameters: Params | Sequence[Params], *,
    answer: bool = False,
) -> Pending:
    """Execute a statement nobody waits for: a write, or a lock taken only to wait.

    In a pipelined transaction it is queued, to be sent ahead of the next
    statement that waits; elsewhere it runs at once. A list of parameter
    sets runs it once for each. With ``answer`` its one value can be read
    from the ``Pending`` returned, once that next statement has waited.
    """
    pending = Pending()
    entry = _PIPELINES.get(connection.connection.driver_connection)  # type: ignore[arg-type]
    if entry is None:
        result = connection.execute(statement, parameters)
        if answer:
            pending._answer = result.scalar_one()
        return pending
    first = parameters if isinstance(parameters, Mapping) else parameters[0]
    compiled = _compiled(statement, connection.dialect, first)
    entry.queued.append(_Queued(compiled, parameters, pending if answer else None))
    return pending


def _compiled(statement: ClauseElement, dialect: Dialect, parameters: Params) -> _Compiled:
    """The statement's SQL and bind processors, compiled on first use, as SQLAlchemy would send it."""
    names = None if isinstance(statement, TextClause) else tuple(parameters)
    key = (id(statement), names)
    if (found := _COMPILED.get(key)) is not None:
        return found
    compiled = statement.compile(dialect=dialect, column_keys=list(names) if names is not None else None)
    binds = set(compiled.bind_names.values())  # type: ignore[attr-defined]
    if not binds <= set(parameters) or compiled.escaped_bind_names or compiled.positional:  # type: ignore[attr-defined]
        raise TypeError(f"a deferred statement binds only the parameters it is given, by name: {compiled.string}")
    processors = {name: processor for name, processor in compiled._bind_processors.items()  # type: ignore[attr-defined]
                  if name in binds}
    made = _COMPILED[key] = _Compiled(statement, compiled.string, processors)
    return made


def _send_queued(driver: psycopg.Connection[Any], entry: _Pipelined) -> None:
    for queued in entry.queued:
        cursor = driver.cursor()
        if isinstance(queued, str):
            cursor.execute(queued)
        elif isinstance(queued.parameters, Mapping):
            cursor.execute(queued.compiled.sql, queued.compiled.parameters(queued.parameters))
        else:
            cursor.executemany(queued.compiled.sql, [queued.compiled.parameters(p) for p in queued.parameters])
        if not isinstance(queued, str) and queued.pending is not None:
            queued.pending._cursor = cursor
    entry.queued.clear()


def _roll_back(driver: psycopg.Connection[Any]) -> None:
    if driver.closed or driver.broken or driver.info.transaction_status == _IDLE:
        return
    with suppress(psycopg.Error):  # the error that matters is the one being raised
        driver.execute("ROLLBACK")


def _hand_back(driver: psycopg.Connection[Any]) -> None:
    """Leave the connection as SQLAlchemy lent it (idle, out of pipeline mode, not autocommit), or closed,
    which the pool takes as lost and replaces."""
    if driver.closed or driver.broken:
        return
    if driver.info.transaction_status == _IDLE and driver.pgconn.pipeline_status == _OFF:
        driver.autocommit = False
    else:
        driver.close()


def _install(engine: Engine) -> None:
    if not event.contains(engine, "do_execute", _execute):
        event.listen(engine, "do_execute", _execute)
        event.listen(engine, "do_execute_no_params", _execute_no_params)


def _execute(cursor: DBAPICursor, statement: str, parameters: Any, context: ExecutionContext) -> bool:
    """Send what was deferred, then this statement, and wait for the answers; False outside a pipeline."""
    driver = cursor.connection  # type: ignore[attr-defined]
    entry = _PIPELINES.get(driver)
    if entry is None:
        return False  # SQLAlchemy executes as usual
    _send_queued(driver, entry)
    cursor.execute(statement, parameters)
    if context.execution_options.get("authledger_ends_pipeline"):
        del _PIPELINES[driver]
        try:
            entry.pipelining.__exit__(None, None, None)  # one sync for all that is pending; leaves pipeline mode
        except psycopg.Error as error:
            if driver.pgconn.pipeline_status != _OFF:
                # The answers broke off (the server went away mid-sync), so psycopg could not leave
                # pipeline mode: the connection is unusable. Closed, SQLAlchemy sees a disconnect.
                driver.close()
                if isinstance(error.__context__, psycopg.Error):
                    raise error.__context__ from None  # what the server said, not what it left behind
            raise
    else:
        entry.pipeline.sync()
    return True


def _execute_no_params(cursor: DBAPICursor, statement: str, context: ExecutionContext) -> bool:
    return _execute(cursor, statement, None, context)
