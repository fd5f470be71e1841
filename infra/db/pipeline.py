"""Pipelined transactions: a write whose answer nobody reads travels with the next statement that is read.

A decision's transaction used to wait for PostgreSQL a dozen times: BEGIN,
the locks, the read, the append, each projection's row, COMMIT. When the
server runs on another core, each wait costs about 0.1 ms of wake-up alone
(bench/RESULTS.md), more than most of those statements take to run.
psycopg's pipeline mode sends statements without waiting for their answers;
the server still runs them one after another, in order, each under its own
snapshot, so nothing about what a statement sees changes.

SQLAlchemy reads a cursor's description the moment it executes, so inside
``pipelined_transaction`` every statement waits for its answer as before,
except those marked ``DEFERRED``: writes whose results are never read (an
upsert, a lock taken only to wait). They go out with the next statement that
waits. BEGIN goes with the first statement and COMMIT with the last writes,
so a reset request waits four times where it waited twelve
(tests/services/test_hot_path.py counts them at the wire). A deferred
statement that fails raises at the next wait, and the transaction rolls
back as it would have.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any
from weakref import WeakKeyDictionary

import psycopg
from psycopg.pq import PipelineStatus, TransactionStatus
from sqlalchemy import Connection, Engine, event, text
from sqlalchemy.engine.interfaces import DBAPICursor, ExecutionContext

DEFERRED: Mapping[str, Any] = {"authledger_deferred": True}  # execution options: nobody reads the result
# Sent by us rather than by psycopg, which waits for its own BEGIN before
# the first statement and sends its COMMIT with a wait of its own.
_BEGIN = text("BEGIN").execution_options(**DEFERRED)
_COMMIT = text("COMMIT").execution_options(authledger_ends_pipeline=True)
_IDLE, _OFF = TransactionStatus.IDLE, PipelineStatus.OFF
# Each driver connection in a pipelined transaction now: its pipeline, and the context that ends it.
# Only the thread that holds a connection touches its entry.
_PIPELINES: WeakKeyDictionary[
    psycopg.Connection[Any], tuple[psycopg.Pipeline, AbstractContextManager[psycopg.Pipeline]]
] = WeakKeyDictionary()


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
            _PIPELINES[driver] = (pipelining.__enter__(), pipelining)
            connection.execute(_BEGIN)
            yield connection
            # Ends the pipeline (see _execute): its closing sync carries the last writes and the COMMIT, and
            # what failed is raised inside SQLAlchemy's execute, translated as any statement's error is.
            connection.execute(_COMMIT)
        except BaseException as error:
            if (entry := _PIPELINES.pop(driver, None)) is not None:
                entry[1].__exit__(type(error), error, error.__traceback__)  # logs, never raises, a second error
            _roll_back(driver)
            raise
        finally:
            _hand_back(driver)
        connection.commit()  # ended already: SQLAlchemy's own bookkeeping, nothing is sent


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
    """Execute in the pipeline, waiting for the answer unless the statement is deferred; False outside one."""
    driver = cursor.connection  # type: ignore[attr-defined]
    if driver not in _PIPELINES:
        return False  # SQLAlchemy executes as usual
    pipeline, pipelining = _PIPELINES[driver]
    cursor.execute(statement, parameters)
    options = context.execution_options
    if options.get("authledger_ends_pipeline"):
        del _PIPELINES[driver]
        try:
            pipelining.__exit__(None, None, None)  # one sync for all that is pending; leaves pipeline mode
        except psycopg.Error as error:
            if driver.pgconn.pipeline_status != _OFF:
                # The answers broke off (the server went away mid-sync), so psycopg could not leave
                # pipeline mode: the connection is unusable. Closed, SQLAlchemy sees a disconnect.
                driver.close()
                if isinstance(error.__context__, psycopg.Error):
                    raise error.__context__ from None  # what the server said, not what it left behind
            raise
    elif not options.get("authledger_deferred"):
        pipeline.sync()
    return True


def _execute_no_params(cursor: DBAPICursor, statement: str, context: ExecutionContext) -> bool:
    return _execute(cursor, statement, None, context)
