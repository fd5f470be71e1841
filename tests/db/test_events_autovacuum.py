"""Autovacuum scans the log after a fixed number of appends, not once it has grown by a fifth.

VACUUM hands the free space map the room left at the end of each page it
scans, and the worker's small events take that room wherever it is. Scanned
late, a large log's room lay on pages long out of cache, and each claim read
them one page an event (bench/RESULTS.md, "Where the worker's small events
land"). The effect is measured in bench/log_size.py; here, that every
database gets the setting, an older one included.
"""

from __future__ import annotations

from sqlalchemy import Engine, text

from infra.db.schema import init_schema

EVENTS_OPTIONS = text("SELECT reloptions FROM pg_class WHERE oid = 'events'::regclass")
FIXED_THRESHOLD = ["autovacuum_vacuum_insert_scale_factor=0", "autovacuum_vacuum_insert_threshold=20000"]


def events_options(engine: Engine) -> list[str]:
    with engine.connect() as connection:
        return sorted(connection.execute(EVENTS_OPTIONS).scalar_one() or [])


def test_the_log_is_vacuumed_after_a_fixed_number_of_appends(admin_engine: Engine) -> None:
    assert events_options(admin_engine) == FIXED_THRESHOLD


def test_db_init_sets_it_on_an_older_database(admin_engine: Engine) -> None:
    with admin_engine.begin() as connection:  # as schema.sql made the table before
        connection.execute(text("ALTER TABLE events RESET (autovacuum_vacuum_insert_scale_factor, "
                                "autovacuum_vacuum_insert_threshold)"))
    assert events_options(admin_engine) == []

    init_schema(admin_engine)

    assert events_options(admin_engine) == FIXED_THRESHOLD
