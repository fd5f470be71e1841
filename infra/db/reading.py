"""Reads that need no transaction of their own: in autocommit, so that no ROLLBACK costs the connection its
prepared statements.

A block opened with ``engine.connect()`` that only reads still begins a
transaction, and SQLAlchemy rolls it back when the block ends. psycopg
answers every rollback by deallocating all that it prepared on the
connection (DEALLOCATE ALL), and the pool lends that connection to the next
request, whose hot statements are then parsed and planned anew, five times
each before psycopg prepares them again. In a running server the API-key
cache's misses and the catch-up runner's polls did that several times a
second (bench/RESULTS.md). A read in autocommit sends no BEGIN and no
ROLLBACK: two waits fewer, and the prepared statements stay. Each statement
then sees a snapshot of its own: reads that must agree with each other take
a transaction (REPEATABLE READ) instead.
"""

from __future__ import annotations

from sqlalchemy import Connection, Engine


def reading(engine: Engine) -> Connection:
    """A connection for reads, each statement on its own (use as ``with reading(engine) as connection``)."""
    return engine.connect().execution_options(isolation_level="AUTOCOMMIT")
