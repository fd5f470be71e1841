"""Round trips to PostgreSQL, counted at the wire: libpq's own trace of what each connection exchanged."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from psycopg import pq
from sqlalchemy import Engine, event


@contextmanager
def round_trips(engine: Engine) -> Iterator[list[int]]:
    """A list that holds, once the block ends, how many times a connection of ``engine`` waited for the server.

    The server answers each Sync (and each simple query) with one
    ReadyForQuery, and a client that sends one waits for it: so the
    ReadyForQuery messages in the trace are the round trips, however many
    statements were pipelined before each.
    """
    counted: list[int] = []
    with tempfile.TemporaryFile() as trace:

        def traced(dbapi_connection: object, _record: object, _proxy: object) -> None:
            pgconn = dbapi_connection.pgconn  # type: ignore[attr-defined]
            pgconn.trace(trace.fileno())
            pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)

        def untraced(dbapi_connection: object, _record: object) -> None:
            dbapi_connection.pgconn.untrace()  # type: ignore[attr-defined]

        event.listen(engine, "checkout", traced)
        event.listen(engine, "checkin", untraced)
        try:
            yield counted
        finally:
            event.remove(engine, "checkout", traced)
            event.remove(engine, "checkin", untraced)
        trace.seek(0)
        counted.append(sum(1 for line in trace.read().decode().splitlines() if "\tReadyForQuery\t" in line))
