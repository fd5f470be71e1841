"""Pipelined transactions: a write whose answer nobody reads travels with the next statement that is read.

A decision's transaction used to wait for PostgreSQL a dozen times: BEGIN,
the locks, the read, the append, each projection's row, COMMIT. When the
server runs on another core, each wait costs about 0.1 ms of wake-up alone
(bench/RESULTS.md), more than most of those statements take to run.
psycopg's pipeline mode sends statements without waiting for their answers;
the server still runs them one after another, in order, each under its own
snapshot, so nothing about what a statement sees changes.

Inside ``pipelined_transaction`` a write whose result is never read (an
upsert, a lock taken only to wait) goes through ``execute_deferred``: it is
queued, and sent just before the next statement that waits. So BEGIN goes
with the first read and COMMIT with the last writes. A deferred statement
whose answer is read later (a try-lock, the rows an append will fold) hands
back a ``Pending`` answer, readable once that next wait is over. A reset
request waits three times where it waited twelve: the stream's read, the
append, the COMMIT (tests/services/test_hot_path.py counts them at the wire).

The hot statements (the deferred ones, the decision's reads through
``execute_read``, and the COMMIT) are compiled once and run by psycopg
itself, without SQLAlchemy's per-execute work: about 0.1 ms of CPU per
statement on this machine, more than most of them take the server to run.
What fails is raised as SQLAlchemy would have raised it, translated by
``infra.db.engine.translate_driver_error``, with a lost connection
invalidated so the pool replaces it; the transaction rolls back. Any other
statement run with ``connection.execute`` waits for its answer as usual,
after what was deferred before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any, NoReturn
from weakref import WeakKeyDictionary

import psycopg
from attrs import define, field, frozen
from psycopg.pq import PipelineStatus, TransactionStatus
from psycopg.rows import namedtuple_row
from sqlalchemy import Connection, Dialect, Engine, event
from sqlalchemy.engine.interfaces import DBAPICursor, ExecutionContext
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import ClauseElement, Executable, TextClause

from infra.db.engine import translate_driver_error

Params = Mapping[str, Any]
# Sent by us rather than by psycopg, which waits for its own BEGIN before
# the first statement and sends its COMMIT with a wait of its own.
_BEGIN, _COMMIT = "BEGIN", "COMMIT"
_IDLE, _OFF = TransactionStatus.IDLE, PipelineStatus.OFF


class Pending:
    """The rows of a deferred statement, readable once a later statement has waited for the server."""

    def __init__(self, rows: Sequence[Any] | None = None) -> None:
        self._cursor: psycopg.Cursor[Any] | None = None  # set when sent; its rows come with the next sync
        self._rows = rows

    def all(self) -> Sequence[Any]:
        """The rows, as ``execute_read`` returns them."""
        if self._cursor is not None:
            self._rows, self._cursor = self._cursor.fetchall(), None
        if self._rows is None:
            raise AssertionError("a deferred statement's rows are read after a statement that waits, not before")
        return self._rows

    @property
    def answered(self) -> bool:
        """Whether its rows can be read: a statement that waits was sent after it (or it ran at once)."""
        return self._cursor is not None or self._rows is not None

    def scalar_one(self) -> Any:
        (row,) = self.all()
        return row[0]


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
    queued: list[_Queued | str] = field(factory=list)  # str: BEGIN or COMMIT


# Each driver connection in a pipelined transaction now: its pipeline, the context that ends it, and the
# deferred statements not sent yet. Only the thread that holds a connection touches its entry.
_PIPELINES: WeakKeyDictionary[psycopg.Connection[Any], _Pipelined] = WeakKeyDictionary()
# The statements psycopg runs here are module constants (or built once per applier), so this stays as small
# as the code: (id, parameter names) -> SQL. Two threads may compile one at once: the same result, kept once.
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
            _PIPELINES[driver] = entry = _Pipelined(pipelining.__enter__(), pipelining, [_BEGIN])
            yield connection
            _commit(connection, driver, entry)
        except BaseException:
            if (aborted := _PIPELINES.pop(driver, None)) is not None:
                # Leaving an aborted pipeline fails again; told of the error in hand, psycopg would log that
                # second one as a warning, with the server's detail. The error being raised is the one that matters.
                with suppress(psycopg.Error):
                    aborted.pipelining.__exit__(None, None, None)
            _roll_back(driver)
            raise
        finally:
            _hand_back(driver)
        connection.commit()  # ended already: SQLAlchemy's own bookkeeping, nothing is sent


def _commit(connection: Connection, driver: psycopg.Connection[Any], entry: _Pipelined) -> None:
    """Send the last writes and the COMMIT, and leave pipeline mode: one sync, one wait."""
    entry.queued.append(_COMMIT)
    try:
        _send_queued(driver, entry)
        del _PIPELINES[driver]
        entry.pipelining.__exit__(None, None, None)
    except psycopg.Error as error:
        if driver not in _PIPELINES and driver.pgconn.pipeline_status != _OFF:
            # Leaving failed: the answers broke off (the server went away mid-sync), so psycopg could not leave
            # pipeline mode: the connection is unusable. Closed, it reads as a disconnect.
            driver.close()
            if isinstance(error.__context__, psycopg.Error):
                error = error.__context__  # what the server said, not what it left behind
        _raise_translated(connection, driver, _COMMIT, None, error)


def execute_deferred(
    connection: Connection, statement: Executable, parameters: Params | Sequence[Params], *,
    answer: bool = False,
) -> Pending:
    """Execute a statement nobody waits for: a write, or a lock taken only to wait.

    In a pipelined transaction it is queued, to be sent ahead of the next
    statement that waits; elsewhere it runs at once. A list of parameter
    sets runs it once for each. With ``answer`` its rows can be read from
    the ``Pending`` returned, once that next statement has waited.
    """
    entry = _PIPELINES.get(connection.connection.driver_connection)  # type: ignore[arg-type]
    if entry is None:
        result = connection.execute(statement, parameters)
        return Pending(result.all() if answer else [])
    pending = Pending()
    first = parameters if isinstance(parameters, Mapping) else parameters[0]
    compiled = _compiled(statement, connection.dialect, first)
    entry.queued.append(_Queued(compiled, parameters, pending if answer else None))
    return pending


def execute_read(connection: Connection, statement: Executable, parameters: Params) -> Sequence[Any]:
    """The rows of a statement that is read, sent with what was deferred before it, and waited for.

    Rows have the columns as attributes, and ``_asdict()``, whether psycopg
    ran the statement (in a pipelined transaction) or SQLAlchemy (elsewhere).
    """
    driver = connection.connection.driver_connection
    entry = _PIPELINES.get(driver)  # type: ignore[arg-type]
    if entry is None:
        return connection.execute(statement, parameters).all()
    assert isinstance(driver, psycopg.Connection)
    compiled = _compiled(statement, connection.dialect, parameters)
    sent = compiled.parameters(parameters)
    try:
        _send_queued(driver, entry)
        cursor = driver.cursor(row_factory=namedtuple_row)
        cursor.execute(compiled.sql, sent)
        entry.pipeline.sync()
        return cursor.fetchall()
    except psycopg.Error as error:
        _raise_translated(connection, driver, compiled.sql, sent, error)


def _raise_translated(
    connection: Connection, driver: psycopg.Connection[Any], sql: str, parameters: Params | None, error: psycopg.Error,
) -> NoReturn:
    """Raise for a statement psycopg ran what SQLAlchemy would have: its DBAPIError, or the authledger error
    the engine's translation makes of it; a lost connection is invalidated, so the pool replaces it."""
    # psycopg's Error and Connection are what SQLAlchemy's DBAPI protocols describe, but not declared as such.
    disconnect = connection.dialect.is_disconnect(error, driver, None)  # type: ignore[arg-type]
    wrapped = DBAPIError.instance(sql, parameters, error, psycopg.Error, connection_invalidated=disconnect,
                                  hide_parameters=connection.engine.hide_parameters, dialect=connection.dialect)
    assert isinstance(wrapped, DBAPIError)  # what instance() makes of an error of the DBAPI's own base class
    if disconnect:
        connection.invalidate(error)
    raise (translate_driver_error(wrapped, connecting=False, is_disconnect=disconnect) or wrapped) from error


def _compiled(statement: Executable, dialect: Dialect, parameters: Params) -> _Compiled:
    """The statement's SQL and bind processors, compiled on first use, as SQLAlchemy would send it."""
    names = None if isinstance(statement, TextClause) else tuple(parameters)
    key = (id(statement), names)
    if (found := _COMPILED.get(key)) is not None:
        return found
    assert isinstance(statement, ClauseElement)  # as every statement SQLAlchemy builds is: it compiles
    compiled = statement.compile(dialect=dialect, column_keys=list(names) if names is not None else None)
    binds = set(compiled.bind_names.values())  # type: ignore[attr-defined]
    if not binds <= set(parameters) or compiled.escaped_bind_names or compiled.positional:  # type: ignore[attr-defined]
        raise TypeError(f"a statement psycopg runs binds only the parameters it is given, by name: {compiled.string}")
    processors = {name: processor for name, processor in compiled._bind_processors.items()  # type: ignore[attr-defined]
                  if name in binds}
    made = _COMPILED[key] = _Compiled(statement, compiled.string, processors)
    return made


def _send_queued(driver: psycopg.Connection[Any], entry: _Pipelined) -> None:
    # Statements nobody reads share one cursor (each cursor costs psycopg a transformer and an adapters map);
    # one read later keeps a cursor of its own, which holds its rows.
    unread = None
    for queued in entry.queued:
        if isinstance(queued, str) or queued.pending is None:
            cursor = unread = unread or driver.cursor()
        else:
            cursor = queued.pending._cursor = driver.cursor(row_factory=namedtuple_row)
        if isinstance(queued, str):
            cursor.execute(queued)
        elif isinstance(queued.parameters, Mapping):
            cursor.execute(queued.compiled.sql, queued.compiled.parameters(queued.parameters))
        else:
            cursor.executemany(queued.compiled.sql, [queued.compiled.parameters(p) for p in queued.parameters])
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
    driver = cursor.connection
    entry = _PIPELINES.get(driver)
    if entry is None:
        return False  # SQLAlchemy executes as usual
    _send_queued(driver, entry)
    cursor.execute(statement, parameters)
    entry.pipeline.sync()
    return True


def _execute_no_params(cursor: DBAPICursor, statement: str, context: ExecutionContext) -> bool:
    return _execute(cursor, statement, None, context)
