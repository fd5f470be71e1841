"""DDL for rebuilds: shadow tables shaped like the live ones, and the swap.

A shadow is ``CREATE TABLE <live>_shadow (LIKE <live> INCLUDING ALL)``: same
columns, defaults, CHECK constraints and indexes (the outbox's partial
``email_outbox_due`` index included), under generated index names. The swap
drops the live table, renames the shadow into its place and gives every
index its live name back, so the schema after a rebuild is the one
schema.sql describes and ``db init`` stays a no-op. Privileges are copied
onto the shadow when it is created, before any lock is taken.

Every identifier here comes from code or from the catalog, and is quoted.
"""

from __future__ import annotations

import re

from attrs import frozen
from sqlalchemy import Connection, Table, text

from infra.projector.appliers import qualified_name, retarget

# DOTALL: PostgreSQL prints an expression index's CASE over several lines.
_QUOTE_RE = re.compile(r'^(CREATE (?:UNIQUE )?INDEX) \S+ ON \S+ (.*)$', re.DOTALL)
PRIVILEGES = frozenset({"SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER"})

INDEXES = text("""
    SELECT c.relname AS name, pg_get_indexdef(i.indexrelid) AS definition
      FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
     WHERE i.indrelid = to_regclass(:table)
     ORDER BY c.relname
""")
GRANTS = text("""
    SELECT a.privilege_type AS privilege,
           CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END AS grantee
      FROM pg_class c, aclexplode(c.relacl) a
     WHERE c.oid = to_regclass(:table) AND a.grantee <> c.relowner
""")


def _quote(connection: Connection, name: str) -> str:
    return connection.dialect.identifier_preparer.quote(name)


@frozen
class Shadow:
    live: Table
    shadow: Table


def shadow_of(live: Table, name: str | None = None, *, schema: str | None = None) -> Shadow:
    """``<live>_shadow`` beside the live table, or another name and schema."""
    return Shadow(live, retarget(live, name or f"{live.name}_shadow", schema))


def create_like(connection: Connection, shadow: Shadow, *, temporary: bool = False) -> None:
    """Create the shadow in the shape of the live table (dropping a leftover of an interrupted run)."""
    connection.execute(text(f"DROP TABLE IF EXISTS {qualified_name(shadow.shadow)}"))
    kind = "TEMPORARY TABLE" if temporary else "TABLE"
    connection.execute(text(
        f"CREATE {kind} {qualified_name(shadow.shadow)} (LIKE {qualified_name(shadow.live)} INCLUDING ALL)"
    ))


def copy_grants(connection: Connection, shadow: Shadow) -> None:
    """Grant on the shadow what is granted on the live table (LIKE copies no privileges)."""
    for row in connection.execute(GRANTS, {"table": qualified_name(shadow.live)}):
        if row.privilege not in PRIVILEGES:
            raise ValueError(f"unexpected privilege {row.privilege!r} on {shadow.live.name}")
        grantee = "PUBLIC" if row.grantee == "PUBLIC" else row.grantee  # regrole::text is already quoted
        connection.execute(text(f"GRANT {row.privilege} ON {qualified_name(shadow.shadow)} TO {grantee}"))


def _index_shape(definition: str) -> str:
    match = _QUOTE_RE.match(definition)
    if match is None:
        raise ValueError(f"cannot read index definition {definition!r}")
    return f"{match.group(1)} {match.group(2)}"


def index_renames(connection: Connection, shadow: Shadow) -> list[tuple[str, str]]:
    """(shadow index, live name) pairs, matched by definition; refuses if the shapes differ."""
    live = {_index_shape(r.definition): r.name
            for r in connection.execute(INDEXES, {"table": qualified_name(shadow.live)})}
    ours = {_index_shape(r.definition): r.name
            for r in connection.execute(INDEXES, {"table": qualified_name(shadow.shadow)})}
    if set(live) != set(ours):
        raise ValueError(f"the indexes of {shadow.shadow.name} do not match those of {shadow.live.name}")
    return [(ours[shape], live[shape]) for shape in sorted(live)]


def swap(connection: Connection, shadow: Shadow, renames: list[tuple[str, str]]) -> None:
    """Put the shadow in the live table's place; inside the caller's (short) transaction."""
    connection.execute(text(f"DROP TABLE {qualified_name(shadow.live)}"))
    connection.execute(text(
        f"ALTER TABLE {qualified_name(shadow.shadow)} RENAME TO {_quote(connection, shadow.live.name)}"
    ))
    schema = f"{_quote(connection, shadow.live.schema)}." if shadow.live.schema else ""
    for ours, live in renames:
        connection.execute(text(f"ALTER INDEX {schema}{_quote(connection, ours)} RENAME TO {_quote(connection, live)}"))


def drop(connection: Connection, shadow: Shadow) -> None:
    connection.execute(text(f"DROP TABLE IF EXISTS {qualified_name(shadow.shadow)}"))


def analyze(connection: Connection, shadow: Shadow) -> None:
    """Give the planner statistics before the swap: the worker's claim query must keep its index."""
    connection.execute(text(f"ANALYZE {qualified_name(shadow.shadow)}"))
