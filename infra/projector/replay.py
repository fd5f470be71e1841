"""`projections replay`: a projection as it stood at a past moment, built into a side schema.

For incident review: ``replay email_outbox --as-of 2024-05-01T10:02:00Z
--into review_0501`` creates ``review_0501.email_outbox`` holding what the
outbox held then, without touching the live tables. The moment is either a
time (events of transactions that began by then: ``recorded_at`` is the
transaction's start) or a global position.

The schema name is checked against a strict pattern before it gets anywhere
near SQL, and a schema is only ever reused or dropped when authledger made
it (its comment says so): ``--drop public`` is refused, as is any schema
someone else created.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from attrs import frozen
from sqlalchemy import Connection, Engine, text

from domain.errors import InvalidInput
from domain.log import Checkpoint
from infra.errors import ReplayTargetExists
from infra.eventlog.reader import LogBound, pages
from infra.projector.appliers import bulk_folding
from infra.projector.registry import Projection
from infra.projector.shadow import create_like, shadow_of

SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
MARK = "authledger replay"
RESERVED = {"public", "information_schema"}

SCHEMA_COMMENT = text("""
    SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = :schema
""")
TABLE_EXISTS = text("SELECT to_regclass(:name) IS NOT NULL")
OPEN_SINCE = text("""
    SELECT count(*) FROM pg_stat_activity
     WHERE backend_xid IS NOT NULL AND xact_start <= :moment AND pid <> pg_backend_pid()
""")


def check_schema_name(schema: str) -> str:
    """The name, if it is a plain lower-case identifier that is not a system schema."""
    if not SCHEMA_NAME.fullmatch(schema) or schema in RESERVED or schema.startswith("pg_"):
        raise InvalidInput(
            f"{schema!r} is not a usable replay schema name: use lower-case letters, digits and underscores "
            "(at most 63, not starting with a digit), and not public, information_schema or pg_*"
        )
    return schema


def _owned(connection: Connection, schema: str) -> bool | None:
    """True if authledger made the schema, False if someone else did, None if it does not exist."""
    row = connection.execute(SCHEMA_COMMENT, {"schema": schema}).first()
    if row is None:
        return None
    return (row[0] or "").startswith(MARK)


@frozen
class ReplayResult:
    projection: str
    schema: str
    tables: list[str]
    events: int
    bound: str
    warnings: list[str]


def replay_into(
    admin: Engine, projection: Projection, schema: str, bound: LogBound, *, batch_size: int = 5000,
    progress: Callable[[int], None] | None = None,
) -> ReplayResult:
    """Build ``projection`` from the events within ``bound`` into tables of ``schema``."""
    schema = check_schema_name(schema)
    shadows = [shadow_of(table, table.name, schema=schema) for table in projection.tables]
    with admin.connect() as connection, bulk_folding():
        owned = _owned(connection, schema)
        if owned is False:
            raise ReplayTargetExists(f"schema {schema} exists and was not made by authledger replay; "
                                     "choose another name")
        for shadow in shadows:
            if connection.execute(TABLE_EXISTS, {"name": f"{schema}.{shadow.live.name}"}).scalar_one():
                raise ReplayTargetExists(f"{schema}.{shadow.live.name} already exists; drop the schema first "
                                   f"(`authledger projections replay --drop {schema}`) or choose another")
        quoted = connection.dialect.identifier_preparer.quote(schema)
        connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {quoted}"))
        connection.execute(text(f"COMMENT ON SCHEMA {quoted} IS '{MARK}: safe to drop'"))
        for shadow in shadows:
            create_like(connection, shadow)
        connection.commit()
        applier = projection.applier.on({s.live.name: s.shadow for s in shadows}, cache_rows=20_000)
        events = 0
        for page in pages(connection, Checkpoint(), bound, batch_size, projection.reading):
            applier.apply(connection, page)
            connection.commit()
            events += len(page)
            if progress is not None:
                progress(len(page))
        warnings = []
        if "as_of" in bound.params:
            still_open = connection.execute(OPEN_SINCE, {"moment": bound.params["as_of"]}).scalar_one()
            if still_open:
                warnings.append(f"{still_open} transaction(s) that began by then are still open; what they "
                                "write will belong to that moment but is not in this replay")
        connection.commit()
    return ReplayResult(projection.name, schema, [f"{schema}.{s.live.name}" for s in shadows], events,
                        bound.describe(), warnings)


def drop_replay(admin: Engine, schema: str) -> None:
    """Drop a schema made by ``replay_into``; refuse any other."""
    schema = check_schema_name(schema)
    with admin.begin() as connection:
        owned = _owned(connection, schema)
        if owned is None:
            raise InvalidInput(f"there is no schema {schema}")
        if not owned:
            raise InvalidInput(f"schema {schema} was not made by authledger replay; not dropping it")
        connection.execute(text(f"DROP SCHEMA {connection.dialect.identifier_preparer.quote(schema)} CASCADE"))
