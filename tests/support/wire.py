"""What a block had PostgreSQL do, counted at the wire: libpq's own trace of what each connection exchanged."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from psycopg import pq
from sqlalchemy import Engine, event

SERVER_MESSAGE = re.compile(r'B\t\d+\t(?P<message>\w+)(?:\t "?(?P<tag>[^"]*)"?)?$')


@dataclass
class Wire:
    """Filled in when the block ends.

    ``round_trips``: the server answers each Sync (and each simple query)
    with one ReadyForQuery, and a client that sends one waits for it: so the
    ReadyForQuery messages are the waits, however many statements were
    pipelined before each. ``statements``: the command tag of each statement
    the server ran, BEGIN and COMMIT apart, whether SQLAlchemy or psycopg
    sent it (``infra.db.pipeline``). ``transactions``: the BEGINs.
    """

    round_trips: int = 0
    statements: list[str] = field(default_factory=list)
    transactions: int = 0


@contextmanager
def at_the_wire(engine: Engine) -> Iterator[Wire]:
    """What the connections of ``engine`` checked out during the block exchanged with the server."""
    wire = Wire()
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
            yield wire
        finally:
            event.remove(engine, "checkout", traced)
            event.remove(engine, "checkin", untraced)
        trace.seek(0)
        for line in trace.read().decode().splitlines():  # a statement's text may span lines: only B's are read
            if (answer := SERVER_MESSAGE.match(line)) is None:
                continue
            if answer["message"] == "ReadyForQuery":
                wire.round_trips += 1
            elif answer["message"] == "CommandComplete" and answer["tag"] == "BEGIN":
                wire.transactions += 1
            elif answer["message"] == "CommandComplete" and answer["tag"] != "COMMIT":
                wire.statements.append(answer["tag"])
