"""`authledger privacy rewrap` on real PostgreSQL: after it, the old master key can go.

Events are written under master key A (the suite's ``test`` key). With B
listed first and A after it, the rewrap moves every data key onto B in small
batches; from then on B alone opens every old event, so an email queued
before the rotation still reaches its recipient. Erased users stay erased, a
re-run finds nothing to do, a dry run and every refused run change nothing.
"""

from __future__ import annotations

import base64
import json
import threading
from datetime import UTC, datetime

import attrs
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import ProgrammingError

from domain.errors import ConfigError
from domain.log import Checkpoint
from domain.privacy import MASTER_KEYS_STREAM, DataKeysRewrapped, decide_rewrap
from domain.reset import RequestReset
from infra.services import rewrap as key_rotation
from infra.projector.catchup import CatchUpRunner
from infra.services.rewrap import Rewrap, rewrap
from infra.eventlog.personal_data import ERASED
from infra.eventlog.postgres import PostgresEventStore
from infra.eventlog.reader import HORIZON, Reading, read_page
from infra.services.privacy import forget
from infra.services.reset import request_reset
from infra.db.schema import init_schema
from infra.audit.seal import seal
from infra.services.unit_of_work import ServiceContext
from infra.eventlog.subject_keys import MASTER_KEY_VARIABLE, MasterKeys, bind_master_keys
from infra.delivery.worker import Worker
from tests.support.cli import Env, run_cli
from tests.support.keys import NEW_MASTER_KEY, TEST_MASTER_KEY, WRONG_MASTER_KEY
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log

OLD = TEST_MASTER_KEY  # A: "test", set for the whole suite by tests/conftest.py
NEW = NEW_MASTER_KEY  # B
ROTATED = f"{NEW},{OLD}"
WRONG_OLD = WRONG_MASTER_KEY  # A's id, other bytes
SENDER = "authledger <no-reply@app.test>"
ADDRESSES = {"1": "ada.lovelace@example.test", "2": "bob.babbage@example.test", "3": "cy.gone@example.test"}
NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)


def users_under_the_old_key(ctx: ServiceContext, engine: Engine) -> None:
    """Three users with a reset email queued under A; the third is then erased."""
    for user_id, address in ADDRESSES.items():
        request_reset(ctx, RequestReset(user_id, address))
    forget(ctx, "3", reason="ticket 3")


def key_rows(engine: Engine) -> dict[str, tuple[str, str, bytes]]:
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT key_id, user_id, master_key_id, wrapped_key FROM subject_keys"))
        return {row.key_id: (row.user_id, row.master_key_id, bytes(row.wrapped_key)) for row in rows}


def snapshot(engine: Engine) -> tuple[list[str], dict[str, tuple[str, str, bytes]]]:
    with engine.connect() as connection:
        log = list(connection.execute(text("SELECT payload::text FROM events ORDER BY global_position")).scalars())
    return log, key_rows(engine)


def rewrapped_events(engine: Engine) -> list[DataKeysRewrapped]:
    with engine.connect() as connection:
        return [r.event for r in PostgresEventStore(connection).load(MASTER_KEYS_STREAM)]


def recipients(engine: Engine) -> dict[str, set[str]]:
    with engine.connect() as connection:
        events = read_page(connection, Checkpoint(), HORIZON, 10_000, reading=Reading(personal_data=True))
    found: dict[str, set[str]] = {}
    for r in events:
        if hasattr(r.event, "recipient"):
            found.setdefault(r.event.user_id, set()).add(r.event.recipient)
    return found


def only(engine: Engine, master_key: str) -> Engine:
    return bind_master_keys(engine, lambda: MasterKeys.parse(master_key))


def test_after_a_rewrap_the_new_master_key_alone_opens_every_old_event_and_erased_users_stay_erased(
    ctx: ServiceContext, engine: Engine
) -> None:
    users_under_the_old_key(ctx, engine)
    before_log, before_keys = snapshot(engine)
    assert {master for _, master, _ in before_keys.values()} == {"test"}

    result = rewrap(ctx, MasterKeys.parse(ROTATED), batch_size=1)

    assert result.as_dict() == {"master_key_id": "m2", "dry_run": False, "rewrapped": 2, "remaining": 0,
                                "by_master_key_id": {"test": {"rewrapped": 2, "remaining": 0}}}
    after_log, after_keys = snapshot(engine)
    assert after_log[: len(before_log)] == before_log, "not one stored byte of the log changed"
    assert after_keys.keys() == before_keys.keys(), "the same data keys, under the same ids"
    assert {user for user, _, _ in after_keys.values()} == {"1", "2"}, "the erased user got no key back"
    assert all(master == "m2" and wrapped != before_keys[key_id][2]
               for key_id, (_, master, wrapped) in after_keys.items())
    assert [(e.master_key_id, e.from_master_key_ids, e.count) for e in rewrapped_events(engine)] == [
        ("m2", ("test",), 1), ("m2", ("test",), 1)], "one event per batch, in the batch's transaction"

    new_only = only(engine, NEW)
    assert recipients(new_only) == {"1": {ADDRESSES["1"]}, "2": {ADDRESSES["2"]}, "3": {ERASED}}
    mailer = RecordingMailer()
    assert Worker(attrs.evolve(ctx, engine=new_only), mailer, sender=SENDER).drain() == {"sent": 2, "skipped": 1}
    assert sorted(e.recipient for e in mailer.emails) == [ADDRESSES["1"], ADDRESSES["2"]]
    assert_projections_match_log(new_only)  # the address index opens personal fields: the new key alone must do
    CatchUpRunner(new_only).run_once()  # the catch-up readers take the new event in their stride
    assert seal(new_only).sealed == len(snapshot(engine)[0]), "the rotation events are sealed like any other"


def test_a_rerun_finds_nothing_to_do_and_records_nothing(ctx: ServiceContext, engine: Engine) -> None:
    users_under_the_old_key(ctx, engine)
    rewrap(ctx, MasterKeys.parse(ROTATED))
    before = snapshot(engine)
    for master_key in (ROTATED, NEW):
        again = rewrap(ctx, MasterKeys.parse(master_key))
        assert again.as_dict()["rewrapped"] == 0 and again.as_dict()["remaining"] == 0
        assert again.summary() == "nothing to do: every data key is wrapped under master key m2"
    assert snapshot(engine) == before


def test_a_dry_run_counts_and_changes_nothing(ctx: ServiceContext, engine: Engine) -> None:
    users_under_the_old_key(ctx, engine)
    before = snapshot(engine)
    result = rewrap(ctx, MasterKeys.parse(ROTATED), dry_run=True)
    assert result.as_dict()["remaining"] == 2 and result.as_dict()["dry_run"] is True
    assert "2 data keys would be re-wrapped under master key m2 (test: 2); nothing changed" in result.summary()
    assert snapshot(engine) == before


def test_a_key_held_by_another_transaction_is_skipped_not_waited_for_and_a_rerun_moves_it(
    ctx: ServiceContext, engine: Engine, admin_engine: Engine
) -> None:
    users_under_the_old_key(ctx, engine)
    master = MasterKeys.parse(ROTATED)
    outcome: list[Rewrap] = []
    with admin_engine.begin() as holder:  # as an erasure in flight would hold it
        holder.execute(text("SELECT 1 FROM subject_keys WHERE user_id = '1' FOR UPDATE"))
        runner = threading.Thread(target=lambda: outcome.append(rewrap(ctx, master)))
        runner.start()
        runner.join(timeout=30)
        assert not runner.is_alive(), "the rewrap waited for a locked row"
    first = outcome[0].as_dict()
    assert (first["rewrapped"], first["remaining"]) == (1, 1)
    assert "still under older master keys: 1 (held by another transaction" in outcome[0].summary()
    second = rewrap(ctx, master).as_dict()
    assert (second["rewrapped"], second["remaining"]) == (1, 0)
    assert {master_id for _, master_id, _ in key_rows(engine).values()} == {"m2"}


def test_an_erasure_after_the_rewrap_still_erases(ctx: ServiceContext, engine: Engine) -> None:
    users_under_the_old_key(ctx, engine)
    rewrap(ctx, MasterKeys.parse(ROTATED))
    forget(ctx, "1", reason="ticket 1")
    assert recipients(only(engine, NEW))["1"] == {ERASED}


def test_the_application_may_change_only_the_wrapping_of_a_key(ctx: ServiceContext, engine: Engine) -> None:
    users_under_the_old_key(ctx, engine)
    with engine.begin() as connection:
        connection.execute(text("UPDATE subject_keys SET master_key_id = master_key_id"))
    for column in ("user_id", "key_id"):
        with pytest.raises(ProgrammingError, match="permission denied"), engine.begin() as connection:
            connection.execute(text(f"UPDATE subject_keys SET {column} = {column}"))


def test_a_key_altered_after_the_check_stops_the_run_and_only_its_batch_is_rolled_back(
    ctx: ServiceContext, engine: Engine, admin_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    users_under_the_old_key(ctx, engine)
    last = max(key_rows(engine))
    monkeypatch.setattr(key_rotation, "_check", lambda *args: None)  # as if altered between check and batch
    with admin_engine.begin() as connection:  # the owner, as someone altering the row would
        connection.execute(text("UPDATE subject_keys SET wrapped_key = :junk WHERE key_id = :k"),
                           {"junk": b"x" * 60, "k": last})
    before = key_rows(engine)
    with pytest.raises(ConfigError) as refused:
        rewrap(ctx, MasterKeys.parse(ROTATED), batch_size=1)
    assert "does not unwrap the data key of user" in refused.value.message
    assert "that batch was rolled back, and the keys re-wrapped before it (1) stay re-wrapped" in refused.value.message
    after = key_rows(engine)
    assert after[last] == before[last], "nothing changed for the key that failed"
    assert [master for _, master, _ in after.values()].count("m2") == 1
    assert sum(e.count for e in rewrapped_events(engine)) == 1, "the log counts exactly the keys moved"


def test_a_database_whose_schema_predates_rotation_is_told_to_run_db_init(
    ctx: ServiceContext, engine: Engine, admin_engine: Engine, env: Env
) -> None:
    users_under_the_old_key(ctx, engine)
    with admin_engine.begin() as connection:
        connection.execute(text("REVOKE UPDATE ON subject_keys FROM authledger_app"))
    before = snapshot(engine)
    result = run_cli({**env, MASTER_KEY_VARIABLE: ROTATED}, "privacy", "rewrap")
    assert result.exit_code == 69, result.output
    assert "may not update subject_keys: run `authledger db init`" in result.output
    assert snapshot(engine) == before
    init_schema(admin_engine)
    assert run_cli({**env, MASTER_KEY_VARIABLE: ROTATED}, "privacy", "rewrap").exit_code == 0


def test_the_rotation_event_records_ids_and_counts_only() -> None:
    assert decide_rewrap({"a": 2, "b": 0, "c": 1}, master_key_id="m2", now=NOW) == [
        DataKeysRewrapped("m2", ("a", "c"), 3, NOW)]
    assert decide_rewrap({"a": 0}, master_key_id="m2", now=NOW) == []
    with pytest.raises(ValueError, match="onto itself"):
        decide_rewrap({"m2": 1}, master_key_id="m2", now=NOW)


# The command line.


def test_the_cli_rewraps_prints_counts_and_records_who_ran_it(
    ctx: ServiceContext, engine: Engine, env: Env
) -> None:
    users_under_the_old_key(ctx, engine)
    dry = run_cli({**env, MASTER_KEY_VARIABLE: ROTATED}, "privacy", "rewrap", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout) == {"master_key_id": "m2", "dry_run": True, "rewrapped": 0, "remaining": 2,
                                      "by_master_key_id": {"test": {"rewrapped": 0, "remaining": 2}}}
    done = run_cli({**env, MASTER_KEY_VARIABLE: ROTATED}, "privacy", "rewrap", "--batch-size", "1")
    assert done.exit_code == 0, done.output
    assert "re-wrapped 2 data keys under master key m2" in done.stdout
    assert "test: 2 re-wrapped, 0 remain" in done.stdout
    assert "no data key is wrapped under an older master key now" in done.stdout
    with engine.connect() as connection:
        recorded = PostgresEventStore(connection).load(MASTER_KEYS_STREAM)
    assert [r.metadata["command"] for r in recorded] == ["privacy rewrap", "privacy rewrap"]
    again = run_cli({**env, MASTER_KEY_VARIABLE: NEW}, "privacy", "rewrap", "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["rewrapped"] == 0 and json.loads(again.stdout)["by_master_key_id"] == {}


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_master_key_id_that_is_not_configured_is_one_clear_line_and_changes_nothing(
    ctx: ServiceContext, engine: Engine, env: Env, dry_run: bool
) -> None:
    users_under_the_old_key(ctx, engine)
    before = snapshot(engine)
    result = run_cli({**env, MASTER_KEY_VARIABLE: NEW}, "privacy", "rewrap", *(["--dry-run"] if dry_run else []))
    assert result.exit_code == 78, result.output
    assert result.output.strip().splitlines() == [(
        "Error: data keys are wrapped by master keys that AUTHLEDGER_MASTER_KEY does not hold (2 by 'test'; it "
        "holds m2): list them after the newest to re-wrap their keys; nothing was changed")]
    assert snapshot(engine) == before


def test_a_different_key_under_a_known_id_is_refused_before_anything_is_written(
    ctx: ServiceContext, engine: Engine, env: Env
) -> None:
    users_under_the_old_key(ctx, engine)
    before = snapshot(engine)
    result = run_cli({**env, MASTER_KEY_VARIABLE: f"{NEW},{WRONG_OLD}"}, "privacy", "rewrap")
    assert result.exit_code == 78, result.output
    assert "master key 'test' does not unwrap the data key of user" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert snapshot(engine) == before
    with pytest.raises(ConfigError, match="does not unwrap"):
        rewrap(ctx, MasterKeys.parse(f"{NEW},{WRONG_OLD}"))


def test_no_key_material_reaches_the_output_or_the_log(
    ctx: ServiceContext, engine: Engine, env: Env
) -> None:
    users_under_the_old_key(ctx, engine)
    result = run_cli({**env, MASTER_KEY_VARIABLE: ROTATED}, "privacy", "rewrap", "--json")
    assert result.exit_code == 0, result.output
    with engine.connect() as connection:
        payloads = " ".join(connection.execute(
            text("SELECT payload::text FROM events WHERE stream_id = :s"), {"s": MASTER_KEYS_STREAM}).scalars())
    secrets = [part.partition(":")[2] for part in ROTATED.split(",")]
    secrets += [base64.b64encode(wrapped).decode() for _, _, wrapped in key_rows(engine).values()]
    secrets += [wrapped.hex() for _, _, wrapped in key_rows(engine).values()]
    for secret in secrets:
        assert secret not in result.output and secret not in payloads
