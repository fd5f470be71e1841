"""Apply schema.sql and check that a database is fit to run authledger."""

from __future__ import annotations

from pathlib import Path

from attrs import frozen
from sqlalchemy import Connection, Engine, text

from domain.errors import SchemaMismatch
from infra.database import APP_ROLE, database_errors

SCHEMA_FILE = Path(__file__).resolve().parent.parent / "schema.sql"
SCHEMA_VERSION = 1

# Two `db init` at once would race on CREATE ... IF NOT EXISTS; a
# transaction-scoped advisory lock makes the second wait for the first.
INIT_LOCK = text("SELECT pg_advisory_xact_lock(hashtext('authledger db init'))")
HAS_SCHEMA = text("SELECT to_regclass('schema_version') IS NOT NULL")
CURRENT_VERSION = text("SELECT max(version) FROM schema_version")
GUARDS = text("""
    SELECT tgname FROM pg_trigger
     WHERE tgrelid = 'events'::regclass AND NOT tgisinternal AND tgenabled <> 'D'
""")
APP_PRIVILEGES = text("""
    SELECT privilege, has_table_privilege(:role, 'events', privilege) AS granted
      FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) AS privilege
""")
# After a logical restore into a fresh cluster the server hands out
# transaction ids below those already in the log, and horizon readers would
# misorder new events. pg_snapshot_xmax is the next id to be assigned.
XID_WRAP = text("""
    SELECT (SELECT max(transaction_id) FROM events)::text AS highest_logged,
           pg_snapshot_xmax(pg_current_snapshot())::text AS next_xid
""")
REQUIRED_TRIGGERS = {"events_no_update_or_delete", "events_no_truncate"}


def current_version(connection: Connection) -> int | None:
    if not connection.execute(HAS_SCHEMA).scalar():
        return None
    return connection.execute(CURRENT_VERSION).scalar()


@frozen
class InitResult:
    version: int
    already_initialised: bool


def init_schema(admin: Engine) -> InitResult:
    """Apply schema.sql; safe to run any number of times."""
    with database_errors(), admin.begin() as connection:
        connection.execute(INIT_LOCK)
        before = current_version(connection)
        # Straight to the driver: with no parameters psycopg sends the script
        # as is, so the '%' in PL/pgSQL messages is not read as a placeholder.
        connection.connection.driver_connection.execute(SCHEMA_FILE.read_text())
        return InitResult(version=SCHEMA_VERSION, already_initialised=before == SCHEMA_VERSION)


@frozen
class CheckReport:
    schema_version: int | None
    expected_version: int
    guards: dict[str, bool]
    app_role_privileges: dict[str, bool]
    highest_logged_xid: int | None
    next_xid: int
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def check_schema(admin: Engine) -> CheckReport:
    """Report schema version, append-only guards and the transaction-id horizon."""
    with database_errors(), admin.connect() as connection:
        version = current_version(connection)
        if version is None:
            raise SchemaMismatch("the database is not initialised for authledger; run `authledger db init`")
        triggers = set(connection.execute(GUARDS).scalars())
        privileges = {row.privilege: row.granted for row in connection.execute(APP_PRIVILEGES, {"role": APP_ROLE})}
        xids = connection.execute(XID_WRAP).one()
    highest = int(xids.highest_logged) if xids.highest_logged is not None else None
    next_xid = int(xids.next_xid)
    guards = {name: name in triggers for name in sorted(REQUIRED_TRIGGERS)}
    problems = []
    if version != SCHEMA_VERSION:
        problems.append(f"schema version is {version}, this authledger expects {SCHEMA_VERSION}")
    problems += [f"append-only trigger {name} is missing or disabled" for name, ok in guards.items() if not ok]
    expected_grants = {"SELECT": True, "INSERT": True, "UPDATE": False, "DELETE": False, "TRUNCATE": False}
    problems += [
        f"{APP_ROLE} {'lacks' if wanted else 'must not have'} {privilege} on events"
        for privilege, wanted in expected_grants.items()
        if privileges.get(privilege) != wanted
    ]
    if highest is not None and highest >= next_xid:
        problems.append(
            f"the server's next transaction id ({next_xid}) is not above the highest in the log ({highest}): "
            "this looks like a logical restore into a fresh cluster, and log readers would misorder new events. "
            "Advance the cluster's transaction ids past the log's (see docs) before starting authledger."
        )
    return CheckReport(version, SCHEMA_VERSION, guards, privileges, highest, next_xid, problems)
