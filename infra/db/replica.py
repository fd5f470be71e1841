"""The optional read replica (``AUTHLEDGER_READ_DATABASE_URL``): which reads go there, and how far behind it is.

Reading work (``history``, ``explain``, the HTTP timeline, the console's
reading pages, ``audit verify``) may go to a streaming standby, so that a
long review or a whole-chain check does not load the primary. Writes never
go there: ``App.engine`` stays the primary's, and a replica's engine is
only ever reached as ``read_engine``.

A replica's answer can be older than the primary's, so wherever it is used
it says by how much. The engine carries a mark (an execution option, as the
master keys' source does), and the look-up that reads through it measures
the lag in the same snapshot as its answer. An engine without the mark (no
replica configured) measures nothing and shows nothing.
"""

from __future__ import annotations

from typing import Any

from attrs import frozen
from sqlalchemy import Connection, Engine, text

REPLICA_OPTION = "authledger_read_replica"

# How far the replica's snapshot is behind the primary. A standby that has
# replayed everything it received is as current as its primary lets it be:
# 0, however long ago the last transaction was (now() - the last replay's
# time alone would grow on an idle primary, a lag that is not one). While
# WAL received is still to be replayed, the time since the last transaction
# replayed. NULL: a standby that has replayed nothing since it started.
LAG = text("""
    SELECT pg_is_in_recovery() AS in_recovery,
           CASE WHEN NOT pg_is_in_recovery() THEN 0
                WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
                ELSE greatest(0, extract(epoch FROM now() - pg_last_xact_replay_timestamp()))
           END::float8 AS seconds_behind
""")


@frozen
class ReplicaLag:
    """What a read from the replica saw: whether the server is a standby, and how many seconds behind it was."""

    in_recovery: bool
    seconds_behind: float | None  # None: a standby that has replayed nothing yet, lag unknown

    def sentence(self) -> str:
        """The line shown with an answer read from the replica."""
        if not self.in_recovery:
            return "read from the read database, 0 s behind: it is not a standby (not in recovery)"
        if self.seconds_behind is None:
            return "read from a replica that has replayed nothing yet: how far behind the primary is unknown"
        return f"read from a replica {_seconds(self.seconds_behind)} behind the primary"

    def as_json(self) -> dict[str, Any]:
        return {"in_recovery": self.in_recovery, "seconds_behind": self.seconds_behind}


def _seconds(seconds: float) -> str:
    """Tenths of a second; a lag too small for them is still a lag, not "0 s"."""
    if 0 < seconds < 0.1:
        return "under 0.1 s"
    return f"{round(seconds, 1):g} s"


def on_replica(engine: Engine) -> Engine:
    """The same engine (and pool), marked as the read replica's: reads through it say how far behind they are."""
    return engine.execution_options(**{REPLICA_OPTION: True})


def replica_lag(connection: Connection) -> ReplicaLag | None:
    """The replica's lag as ``connection`` sees it, in its snapshot; None for a connection to the primary."""
    if not connection.get_execution_options().get(REPLICA_OPTION):
        return None
    row = connection.execute(LAG).one()
    return ReplicaLag(row.in_recovery, row.seconds_behind)


def replica_lag_of(engine: Engine) -> ReplicaLag | None:
    """``replica_lag`` on a connection of its own, for answers read over several connections (the outbox page)."""
    if not engine.get_execution_options().get(REPLICA_OPTION):
        return None
    with engine.connect() as connection:
        return replica_lag(connection)
