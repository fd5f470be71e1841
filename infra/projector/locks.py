"""One rebuild or verify of a projection at a time, refused with a clear message otherwise.

A session-level advisory lock, held on the connection that does the work:
it ends with that connection, so a rebuild killed with SIGKILL never leaves
a stale lock behind. The holder sets ``application_name``, so the refusal
can say who holds the lock and since when.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sqlalchemy import Connection, text

from infra.errors import ProjectionBusy

# Two-key advisory locks: this namespace, and a hash of the projection's name.
NAMESPACE = 0x61757468  # "auth"

TRY_LOCK = text("SELECT pg_try_advisory_lock(:namespace, hashtext(:name))")
UNLOCK = text("SELECT pg_advisory_unlock(:namespace, hashtext(:name))")
SET_NAME = text("SELECT set_config('application_name', :label, false)")
HOLDER = text("""
    SELECT a.pid, a.application_name, a.backend_start, a.client_addr::text AS client_addr
      FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
       AND l.classid = CAST(:namespace AS bigint)::oid
       AND l.objid = CAST(hashtext(:name)::bigint & 4294967295 AS bigint)::oid
""")


@contextlib.contextmanager
def projection_lock(connection: Connection, name: str, purpose: str) -> Iterator[None]:
    """Hold the projection's lock for the block; ``ProjectionBusy`` when someone else has it."""
    params = {"namespace": NAMESPACE, "name": name}
    if not connection.execute(TRY_LOCK, params).scalar_one():
        holder = connection.execute(HOLDER, params).first()
        connection.rollback()
        who = (f"{holder.application_name or 'a session'} (pid {holder.pid}, connected since "
               f"{holder.backend_start.isoformat(timespec='seconds')})") if holder else "another session"
        raise ProjectionBusy(f"cannot {purpose} {name}: {who} is already rebuilding or verifying it; "
                             "wait for it to finish (only one at a time, so that neither swaps tables "
                             "under the other)")
    connection.execute(SET_NAME, {"label": f"authledger {purpose} {name}"})
    connection.commit()
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            connection.rollback()
            connection.execute(UNLOCK, params)
            connection.execute(SET_NAME, {"label": ""})
            connection.commit()
