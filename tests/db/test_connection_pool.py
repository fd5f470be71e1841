"""Pooled connections: checked before use once they sat idle, so a server-side kill costs no request."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import Engine, text
from infra.errors import DatabaseUnavailable
from infra.db.engine import PING_WHEN_IDLE_SECONDS, Database


def backend_pid(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(text("SELECT pg_backend_pid()")).scalar_one()


def terminate(admin_engine: Engine, pid: int) -> None:
    with admin_engine.connect() as connection:
        connection.execute(text("SELECT pg_terminate_backend(:pid, 5000)"), {"pid": pid})


def test_a_connection_killed_while_idle_is_replaced_before_anyone_uses_it(
    database: Database, admin_engine: Engine
) -> None:
    engine = database.engine(pool_size=1)
    try:
        first = backend_pid(engine)
        terminate(admin_engine, first)
        time.sleep(PING_WHEN_IDLE_SECONDS + 0.1)

        assert backend_pid(engine) != first
    finally:
        engine.dispose()


def test_a_connection_used_a_moment_ago_is_not_pinged_and_a_kill_in_that_moment_fails_one_use_only(
    database: Database, admin_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("infra.db.engine.PING_WHEN_IDLE_SECONDS", 60.0)  # "a moment", however slow CI is
    engine = database.engine(pool_size=1)
    try:
        first = backend_pid(engine)
        terminate(admin_engine, first)

        with pytest.raises(DatabaseUnavailable):
            backend_pid(engine)  # within the window: no ping, the dead connection is used once

        assert backend_pid(engine) != first, "the pool replaced it after the failure"
    finally:
        engine.dispose()
