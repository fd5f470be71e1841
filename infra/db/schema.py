"""Apply schema.sql and check that a database is fit to run authledger."""

from __future__ import annotations

from pathlib import Path

from attrs import frozen
from sqlalchemy import Connection, Engine, text

from infra.errors import SchemaMismatch
from infra.db.engine import APP_ROLE

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "schema.sql"
SCHEMA_VERSION = 7  # the newest version schema.sql records; see its last lines

# Two `db init` at once would race on CREATE ... IF NOT EXISTS; a
# transaction-scoped advisory lock makes the second wait for the first.
INIT_LOCK = text("SELECT pg_advisory_xact_lock(hashtext('authledger db init'))")
HAS_SCHEMA = text("SELECT to_regclass('schema_version') IS NOT NULL")
CURRENT_VERSION = text("SELECT max(version) FROM schema_version")
# A trigger guards the service only when it fires in an ordinary session:
# 'O' (origin) or 'A' (always). 'D' is disabled, and 'R' fires only under
# session_replication_role = replica, so both count as missing. to_regclass
# lets a missing table read as missing guards instead of an error.
GUARDS = text("""
    SELECT tgname FROM pg_trigger
     WHERE tgrelid = to_regclass(:table) AND NOT tgisinternal AND tgenabled IN ('O', 'A')
""")
APP_PRIVILEGES = text("""
    SELECT privilege,
           CASE WHEN to_regclass(:table) IS NULL THEN false
                ELSE has_table_privilege(:role, :table, privilege) END AS granted
      FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) AS privilege
""")
# After a logical restore into a fresh cluster the server hands out
# transaction ids below those already in the log, and horizon readers would
# misorder new events. pg_snapshot_xmax is the next id to be assigned.
XID_WRAP = text("""
    SELECT (SELECT max(transaction_id) FROM events)::text AS highest_logged,
           pg_snapshot_xmax(pg_current_snapshot())::text AS next_xid
""")
# The append-only tables (schema.sql): trigger -> what it rejects, from every
# role (the application role is also denied the privileges); and what a table
# open to change would mean.
APPEND_ONLY_GUARDS = {
    "events": {"events_no_update_or_delete": "UPDATE and DELETE", "events_no_truncate": "TRUNCATE"},
    "seals": {"seals_no_update_or_delete": "UPDATE and DELETE", "seals_no_truncate": "TRUNCATE"},
}
UNGUARDED_MEANS = {
    "events": "the log itself can be rewritten",
    "seals": "the hash-chain seals can be rewritten to match a changed log, and `audit verify` would prove nothing",
}
# The application role may read and append these tables, never change them.
APPEND_ONLY_GRANTS = {"SELECT": True, "INSERT": True, "UPDATE": False, "DELETE": False, "TRUNCATE": False}


def current_version(connection: Connection) -> int | None:
    if not connection.execute(HAS_SCHEMA).scalar():
        return None
    return connection.execute(CURRENT_VERSION).scalar()


@frozen
class InitResult:
    version: int
    already_initialised: bool
    upgraded_from: int | None = None


def init_schema(admin: Engine) -> InitResult:
    """Apply schema.sql; safe to run any number of times."""
    with admin.begin() as connection:
        connection.execute(INIT_LOCK)
        before = current_version(connection)
        # Straight to the driver: with no parameters psycopg sends the script
        # as is, so the '%' in PL/pgSQL messages is not read as a placeholder.
        driver = connection.connection.driver_connection
        assert driver is not None  # a connection in a transaction has its driver's
        driver.execute(SCHEMA_FILE.read_text())
        return InitResult(version=SCHEMA_VERSION, already_initialised=before == SCHEMA_VERSION, upgraded_from=before
                          if before is not None and before != SCHEMA_VERSION else None)


@frozen
class CheckReport:
    schema_version: int | None
    expected_version: int
    guards: dict[str, dict[str, bool]]  # append-only table -> trigger -> in place
    app_role_privileges: dict[str, dict[str, bool]]  # append-only table -> privilege -> granted
    highest_logged_xid: int | None
    next_xid: int
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def check_schema(admin: Engine) -> CheckReport:
    """Report schema version, append-only guards and the transaction-id horizon."""
    with admin.connect() as connection:
        version = current_version(connection)
        if version is None:
            raise SchemaMismatch("the database is not initialised for authledger; run `authledger db init`")
        triggers = {table: set(connection.execute(GUARDS, {"table": table}).scalars())
                    for table in APPEND_ONLY_GUARDS}
        privileges = {
            table: {row.privilege: row.granted
                    for row in connection.execute(APP_PRIVILEGES, {"role": APP_ROLE, "table": table})}
            for table in APPEND_ONLY_GUARDS
        }
        xids = connection.execute(XID_WRAP).one()
    highest = int(xids.highest_logged) if xids.highest_logged is not None else None
    next_xid = int(xids.next_xid)
    guards = {table: {name: name in triggers[table] for name in sorted(names)}
              for table, names in APPEND_ONLY_GUARDS.items()}
    problems = []
    if version is None or version < SCHEMA_VERSION:  # a newer one is fine: schema.sql only ever adds
        problems.append(f"schema version is {version}, this authledger expects {SCHEMA_VERSION}")
    problems += [
        f"append-only trigger {name} is missing or disabled: {table} no longer rejects "
        f"{APPEND_ONLY_GUARDS[table][name]} from its owner or a superuser, so {UNGUARDED_MEANS[table]}; "
        "`authledger db init` puts the trigger back"
        for table, in_place in guards.items() for name, ok in in_place.items() if not ok
    ]
    problems += [
        (f"{APP_ROLE} lacks {privilege} on {table}; `authledger db init` grants it" if wanted else
         f"{APP_ROLE} must not have {privilege} on {table}: REVOKE {privilege} ON {table} FROM {APP_ROLE}")
        for table, granted in privileges.items() for privilege, wanted in APPEND_ONLY_GRANTS.items()
        if granted.get(privilege) != wanted
    ]
    if highest is not None and highest >= next_xid:
        problems.append(
            f"the server's next transaction id ({next_xid}) is not above the highest in the log ({highest}): "
            "this looks like a logical restore into a fresh cluster, and log readers would misorder new events. "
            "Advance the cluster's transaction ids past the log's (see docs) before starting authledger."
        )
    return CheckReport(version, SCHEMA_VERSION, guards, privileges, highest, next_xid, problems)
