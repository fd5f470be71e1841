"""Master keys come from configuration: rotation by key id, and clear errors that change nothing."""

from __future__ import annotations

import os
import stat
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import Result
from sqlalchemy import Engine, text

from domain.errors import ConfigError
from domain.reset import RequestReset
from infra.config.settings import Settings
from infra.keys import DEV_MASTER_KEY_FILE, load_master_keys, load_token_keys
from infra.eventlog.personal_data import key_id_of
from infra.eventlog.postgres import PostgresEventStore
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from infra.eventlog.subject_keys import (
    MASTER_KEY_VARIABLE, SAMPLE_UNDER_MASTER, MasterKeys, PostgresKeyring, bind_master_keys)
from tests.support.cli import Env, run_cli
from tests.support.keys import NEW_MASTER_KEY, TEST_MASTER_KEY, WRONG_MASTER_KEY
from tests.support.statements import statements_sent


def request(env: Env, master_key: str, user_id: str) -> Result:
    return run_cli({**env, MASTER_KEY_VARIABLE: master_key}, "reset", "request", "--user-id", user_id, "--email",
                   "a@example.test")


def snapshot(engine: Engine) -> tuple[int, list[tuple[object, ...]]]:
    with engine.connect() as connection:
        events = connection.execute(text("SELECT count(*) FROM events")).scalar_one()
        keys = [tuple(r) for r in connection.execute(text("SELECT * FROM subject_keys ORDER BY user_id"))]
    return events, keys


def master_key_ids(engine: Engine) -> dict[str, str]:
    with engine.connect() as connection:
        return dict(connection.execute(text("SELECT user_id, master_key_id FROM subject_keys")).all())


def test_without_a_master_key_a_request_is_refused_clearly_and_writes_nothing(
    engine: Engine, env: Env
) -> None:
    result = request(env, "", "1")
    assert result.exit_code == 78, result.output
    assert "AUTHLEDGER_MASTER_KEY is required when DATABASE_URL is set" in result.output
    assert snapshot(engine) == (0, [])


def test_a_wrong_master_key_is_refused_before_it_wraps_or_reads_anything(
    ctx: ServiceContext, engine: Engine, env: Env
) -> None:
    request_reset(ctx, RequestReset("1", "ada@example.test"))
    before = snapshot(engine)
    for user_id in ("1", "2"):  # a user with a key, and one who would get a new key
        result = request(env, WRONG_MASTER_KEY, user_id)
        assert result.exit_code == 78, result.output
        assert "master key 'test' does not unwrap the data key of user '1'" in result.output
        assert "Traceback" not in result.output
    assert "holds a different key under that id" in result.output
    assert snapshot(engine) == before


def test_a_malformed_master_key_is_refused_at_start(env: Env) -> None:
    result = request(env, "test:dG9vIHNob3J0", "1")
    assert result.exit_code == 78
    assert "AUTHLEDGER_MASTER_KEY key 'test' is 9 bytes; a master key is exactly 32" in result.output


def test_rotation_wraps_new_keys_under_the_new_id_and_old_ids_still_unwrap(
    ctx: ServiceContext, engine: Engine, env: Env
) -> None:
    request_reset(ctx, RequestReset("1", "ada@example.test"))
    rotated = f"{NEW_MASTER_KEY},{TEST_MASTER_KEY}"
    assert request(env, rotated, "2").exit_code == 0
    assert master_key_ids(engine) == {"1": "test", "2": "m2"}
    assert request(env, rotated, "1").exit_code == 0, "user 1's key, wrapped by the old id, still opens"
    with bind_master_keys(engine, lambda: MasterKeys.parse(rotated)).connect() as connection:
        store = PostgresEventStore(connection)
        recipients = {user_id: {r.event.recipient for r in store.load(f"reset-user:{user_id}")
                                if hasattr(r.event, "recipient")} for user_id in ("1", "2")}
    assert recipients == {"1": {"ada@example.test", "a@example.test"}, "2": {"a@example.test"}}


def test_a_master_key_id_dropped_too_early_is_named_in_the_error(
    ctx: ServiceContext, engine: Engine, env: Env
) -> None:
    request_reset(ctx, RequestReset("1", "ada@example.test"))
    result = request(env, NEW_MASTER_KEY, "1")
    assert result.exit_code == 78
    assert "wrapped by master key 'test', which AUTHLEDGER_MASTER_KEY does not hold (it holds m2)" in result.output
    assert "keep the older ids listed" in result.output


def test_forget_needs_no_master_key_so_a_lost_one_never_blocks_an_erasure(
    ctx: ServiceContext, engine: Engine, env: Env
) -> None:
    request_reset(ctx, RequestReset("1", "ada@example.test"))
    result = run_cli({**env, MASTER_KEY_VARIABLE: ""}, "privacy", "forget", "--user-id", "1", "--yes", "--reason",
                     "ticket 7")
    assert result.exit_code == 0, result.output
    assert snapshot(engine)[1] == []


def test_an_engine_bound_to_other_master_keys_uses_them(ctx: ServiceContext, engine: Engine) -> None:
    request_reset(ctx, RequestReset("1", "ada@example.test"))
    wrong = bind_master_keys(engine, lambda: MasterKeys.parse(WRONG_MASTER_KEY))
    with wrong.connect() as connection, pytest.raises(ConfigError, match="does not unwrap"):
        PostgresKeyring(connection).writing_key("1")


def test_an_unbound_engine_without_the_variable_is_a_clear_error(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(MASTER_KEY_VARIABLE)
    with engine.connect() as connection, pytest.raises(ConfigError, match="AUTHLEDGER_MASTER_KEY is not set"):
        PostgresKeyring(connection).writing_key("1")


def test_the_embedded_default_generates_a_private_development_master_key_once(tmp_path: Path) -> None:
    first = load_master_keys(Settings(data_dir=tmp_path))
    assert load_master_keys(Settings(data_dir=tmp_path)) == first and first.current_id == "dev"
    assert stat.S_IMODE((tmp_path / DEV_MASTER_KEY_FILE).stat().st_mode) == 0o600
    with pytest.raises(ConfigError, match="required when DATABASE_URL is set"):
        load_master_keys(Settings(data_dir=tmp_path, database_url="postgresql://x/y"))


def test_development_keys_warn_once_per_process_however_often_they_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(data_dir=tmp_path)
    with caplog.at_level("WARNING", logger="authledger.keys"):
        for _ in range(3):  # as a reset command loads the token keys, then the master key, more than once
            load_token_keys(settings)
            load_master_keys(settings)
    assert [r.getMessage() for r in caplog.records] == [
        "using generated development keys; set AUTHLEDGER_TOKEN_KEYS and AUTHLEDGER_MASTER_KEY in production"
    ]


def test_a_master_key_proven_on_a_database_is_not_checked_again_for_the_next_new_users(
    ctx: ServiceContext, engine: Engine
) -> None:
    request_reset(ctx, RequestReset("1", "ada@example.test"))
    request_reset(ctx, RequestReset("2", "bea@example.test"))  # checked against user 1's key: proven
    with statements_sent(engine) as sent:
        request_reset(ctx, RequestReset("3", "cy@example.test"))
    assert not any("master_key_id = " in statement for statement in sent), "no sample of the master's keys read"
    assert master_key_ids(engine) == {"1": "test", "2": "test", "3": "test"}


def test_a_wrong_key_under_a_proven_id_is_still_refused_before_it_wraps_anything(
    ctx: ServiceContext, engine: Engine, env: Env
) -> None:
    request_reset(ctx, RequestReset("1", "ada@example.test"))
    request_reset(ctx, RequestReset("2", "bea@example.test"))  # the right key is proven in this process
    before = snapshot(engine)
    result = request(env, WRONG_MASTER_KEY, "3")
    assert result.exit_code == 78, result.output
    assert "master key 'test' does not unwrap the data key of user" in result.output
    assert snapshot(engine) == before


def recipient_key_ids(engine: Engine, stream_id: str) -> list[str]:
    with engine.connect() as connection:
        sealed = connection.execute(text(
            "SELECT payload->>'recipient' FROM events WHERE stream_id = :stream AND payload ? 'recipient' "
            "ORDER BY stream_version"), {"stream": stream_id}).scalars().all()
    return [key_id_of(envelope) for envelope in sealed]


def test_a_decision_seals_under_the_users_oldest_key_not_the_one_it_read_the_stream_with(
    ctx: ServiceContext, engine: Engine
) -> None:
    # Two writers that created a user's first key at once each kept theirs; from then on the oldest is used,
    # even by a decision that has just opened the stream's requests under the other one.
    first = request_reset(ctx, RequestReset("1", "ada@example.test"))
    [read_with] = set(recipient_key_ids(engine, "reset-user:1"))
    master = MasterKeys.parse(TEST_MASTER_KEY)
    master_key_id, wrapped = master.wrap("1", "older", os.urandom(32))
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO subject_keys (key_id, user_id, master_key_id, wrapped_key, created_at) "
            "VALUES ('older', '1', :master, :wrapped, now() - interval '1 hour')"),
            {"master": master_key_id, "wrapped": wrapped})
    ctx.clock.advance(ctx.reset_policy.cooldown + timedelta(seconds=1))  # type: ignore[attr-defined]

    second = request_reset(ctx, RequestReset("1", "ada@example.test"))

    assert second.request_id != first.request_id
    assert recipient_key_ids(engine, "reset-user:1") == [read_with, "older"]


def test_a_new_users_probe_of_the_current_master_key_reads_an_index_not_every_key(engine: Engine) -> None:
    # After a rotation no key is under the new master key yet: a sequential
    # scan would read every user's key on each new user's first request.
    with engine.begin() as connection:
        connection.execute(text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(connection.execute(text("EXPLAIN " + SAMPLE_UNDER_MASTER.text),
                                            {"master_key_id": "m2"}).scalars())
    assert "subject_keys_by_master" in plan and "Seq Scan" not in plan, plan
