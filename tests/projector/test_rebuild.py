"""`projections rebuild`: shadow tables built from the log, swapped in, equal to a replay."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, text

from infra.errors import ProjectionBusy
from infra.projector.catchup import catch_up
from infra.clock import ManualClock
from infra.projector.registry import all_projections, projection_named
from infra.projector.rebuild import rebuild
from infra.db.schema import init_schema
from infra.services.unit_of_work import ServiceContext
from tests.support.replay import assert_projections_match_log
from tests.support.traffic import delivered_emails, some_traffic

CATALOG = text("""
    SELECT t.relname AS table_name, i.relname AS index_name, pg_get_indexdef(i.oid) AS definition
      FROM pg_index x JOIN pg_class t ON t.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid
     WHERE t.relnamespace = 'public'::regnamespace AND t.relname = ANY(:tables)
     ORDER BY 1, 2
""")
GRANTS = text("""
    SELECT table_name, privilege_type FROM information_schema.role_table_grants
     WHERE grantee = 'authledger_app' AND table_name = ANY(:tables) ORDER BY 1, 2
""")


def catalog(admin_engine: Engine) -> tuple[list[tuple], list[tuple]]:
    names = [t.name for p in all_projections() for t in p.tables]
    with admin_engine.connect() as connection:
        return ([tuple(r) for r in connection.execute(CATALOG, {"tables": names})],
                [tuple(r) for r in connection.execute(GRANTS, {"tables": names})])


@pytest.mark.parametrize("name", [p.name for p in all_projections()])
def test_a_rebuilt_projection_equals_a_replay_and_keeps_its_indexes_and_grants(
    name: str, ctx: ServiceContext, clock: ManualClock, engine: Engine, admin_engine: Engine
) -> None:
    some_traffic(ctx, clock)
    assert_projections_match_log(engine)
    before = catalog(admin_engine)

    projection = projection_named(name)
    result = rebuild(admin_engine, projection, batch_size=7)

    with admin_engine.connect() as connection:
        folded = connection.execute(text("SELECT count(*) FROM events WHERE :all OR event_type = ANY(:types)"), {
            "all": projection.event_types is None, "types": sorted(projection.event_types or ())}).scalar_one()
    assert result.events == folded, "it read every event of the types it folds"
    assert catalog(admin_engine) == before, "same index names and definitions, same privileges"
    assert_projections_match_log(engine, run_catch_up=False)
    assert init_schema(admin_engine).already_initialised
    some_traffic(ctx, clock)  # the application role still reads and writes the new tables
    assert_projections_match_log(engine)


def outbox_identity(admin_engine: Engine) -> tuple[int, list[tuple]]:
    with admin_engine.connect() as connection:
        oid = connection.execute(text("SELECT 'email_outbox'::regclass::oid")).scalar_one()
        rows = [tuple(r) for r in connection.execute(text("SELECT * FROM email_outbox ORDER BY message_id"))]
        shadows = connection.execute(text(
            "SELECT count(*) FROM pg_class WHERE relname LIKE '%\\_shadow' AND relnamespace = 'public'::regnamespace"
        )).scalar_one()
    assert shadows == 0, "no shadow table is left behind"
    return oid, rows


def test_an_interrupted_rebuild_leaves_the_live_tables_untouched(
    ctx: ServiceContext, clock: ManualClock, admin_engine: Engine
) -> None:
    some_traffic(ctx, clock)
    before = outbox_identity(admin_engine)

    def interrupt(events: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        rebuild(admin_engine, projection_named("email_outbox"), batch_size=5, progress=interrupt)

    assert outbox_identity(admin_engine) == before
    assert rebuild(admin_engine, projection_named("email_outbox")).events > 0, "the lock was released"


def test_a_swap_that_cannot_get_its_lock_gives_up_and_leaves_the_live_tables_untouched(
    ctx: ServiceContext, clock: ManualClock, engine: Engine, admin_engine: Engine
) -> None:
    some_traffic(ctx, clock)
    before = outbox_identity(admin_engine)
    with engine.connect() as reader:
        reader.execute(text("SELECT count(*) FROM email_outbox"))  # a long reader keeps its ACCESS SHARE lock
        with pytest.raises(ProjectionBusy, match="could not lock email_outbox for the swap"):
            rebuild(admin_engine, projection_named("email_outbox"), lock_timeout=0.1, swap_attempts=2)
    assert outbox_identity(admin_engine) == before


def test_large_pages_are_written_through_copy_and_still_equal_a_replay(engine: Engine, admin_engine: Engine) -> None:
    with engine.begin() as connection:
        delivered_emails(connection, 1200)  # 3,600 events: pages of thousands of rows
    assert catch_up(engine, batch_size=5000) == {"delivery_stats": 3600, "audit_index": 3600}
    for name in ("email_outbox", "delivery_stats"):
        assert rebuild(admin_engine, projection_named(name), batch_size=5000).events == 3600
    assert_projections_match_log(engine, run_catch_up=False)
