"""`authledger db init|check` and the errors a user sees when the database is wrong."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from infra.db.schema import SCHEMA_VERSION
from tests.support.cli import Env, cli_env, cli_outcome, process_env, run_cli

AUTHLEDGER = str(Path(sys.executable).parent / "authledger")


def test_db_init_twice_is_safe_and_says_so(env: Env) -> None:
    code, output = cli_outcome(env, "db", "init")
    assert code == 0 and "already initialised" in output
    code, output = cli_outcome(env, "db", "init", "--json")
    assert code == 0 and json.loads(output)["already_initialised"] is True


def test_db_check_reports_the_schema_and_the_guards_of_the_log_and_its_seals(env: Env) -> None:
    code, output = cli_outcome(env, "db", "check", "--json")
    report = json.loads(output)
    assert code == 0, output
    assert report["ok"] and report["schema_version"] == SCHEMA_VERSION and report["problems"] == []
    assert report["guards"] == {
        "events": {"events_no_truncate": True, "events_no_update_or_delete": True},
        "seals": {"seals_no_truncate": True, "seals_no_update_or_delete": True},
    }
    read_and_append = {"SELECT": True, "INSERT": True, "UPDATE": False, "DELETE": False, "TRUNCATE": False}
    assert report["app_role_privileges"] == {"events": read_and_append, "seals": read_and_append}
    code, output = cli_outcome(env, "db", "check")
    assert code == 0, output
    assert "append-only      seals: seals_no_truncate on, seals_no_update_or_delete on" in output
    assert "app role         seals: SELECT yes, INSERT yes, UPDATE no, DELETE no, TRUNCATE no" in output


def test_db_check_warns_in_one_line_when_no_standby_confirms_commits_yet_stays_ok(env: Env) -> None:
    code, output = cli_outcome(env, "db", "check")
    warnings = [line for line in output.splitlines() if line.startswith("warning:")]

    assert code == 0 and output.rstrip().endswith("ok")
    assert warnings == ["warning: not replicated synchronously (synchronous_standby_names is empty): a failover "
                        "can lose requests already answered 202; see docs/operations.md"]
    report = json.loads(cli_outcome(env, "db", "check", "--json")[1])
    assert report["replication"]["synchronous_standbys"] == [] and report["warnings"] == [warnings[0][9:]]


def test_db_check_fails_when_a_guard_is_disabled(env: Env, admin_engine: Engine) -> None:
    with admin_engine.begin() as connection:
        connection.execute(text("ALTER TABLE events DISABLE TRIGGER events_no_truncate"))
    code, output = cli_outcome(env, "db", "check")
    assert code == 1
    assert "events_no_truncate is missing or disabled" in output


@pytest.mark.parametrize(
    ("sabotage", "trigger", "rejects"),
    [
        ("DROP TRIGGER seals_no_update_or_delete ON seals", "seals_no_update_or_delete", "UPDATE and DELETE"),
        ("DROP TRIGGER seals_no_truncate ON seals", "seals_no_truncate", "TRUNCATE"),
        # A replica trigger fires only under session_replication_role = replica: never for the service.
        ("ALTER TABLE seals ENABLE REPLICA TRIGGER seals_no_truncate", "seals_no_truncate", "TRUNCATE"),
    ],
)
def test_db_check_fails_and_says_why_when_a_guard_of_the_seals_is_gone(
    env: Env, admin_engine: Engine, sabotage: str, trigger: str, rejects: str
) -> None:
    with admin_engine.begin() as connection:
        connection.execute(text(sabotage))
    code, output = cli_outcome(env, "db", "check")
    assert code == 1
    assert f"{trigger} MISSING" in output
    assert (f"problem: append-only trigger {trigger} is missing or disabled: seals no longer rejects {rejects} "
            "from its owner or a superuser, so the hash-chain seals can be rewritten") in output
    assert "`authledger db init` puts the trigger back" in output
    assert output.rstrip().endswith("NOT OK")
    code, output = cli_outcome(env, "db", "check", "--json")
    report = json.loads(output)
    assert code == 1 and report["ok"] is False
    assert report["guards"]["seals"][trigger] is False
    assert all(report["guards"]["events"].values()), "the log's own guards are untouched"
    assert len(report["problems"]) == 1


def test_db_init_puts_a_dropped_guard_of_the_seals_back(env: Env, admin_engine: Engine) -> None:
    with admin_engine.begin() as connection:
        connection.execute(text("DROP TRIGGER seals_no_truncate ON seals"))
    assert cli_outcome(env, "db", "check")[0] == 1
    assert cli_outcome(env, "db", "init")[0] == 0
    code, output = cli_outcome(env, "db", "check")
    assert code == 0, output


def test_db_check_fails_when_the_app_role_may_change_the_seals(env: Env, admin_engine: Engine) -> None:
    with admin_engine.begin() as connection:
        connection.execute(text("GRANT UPDATE ON seals TO authledger_app"))
    code, output = cli_outcome(env, "db", "check")
    assert code == 1
    assert "app role         seals: SELECT yes, INSERT yes, UPDATE yes, DELETE no, TRUNCATE no" in output
    assert "problem: authledger_app must not have UPDATE on seals: REVOKE UPDATE ON seals FROM authledger_app" \
        in output
    assert cli_outcome(env, "db", "init")[0] == 0
    assert cli_outcome(env, "db", "check")[0] == 0, "db init took the grant back"


def test_db_check_fails_after_a_logical_restore_into_a_fresh_cluster(env: Env, admin_engine: Engine) -> None:
    """A log whose transaction ids run ahead of the server's is what a restore into a new cluster looks like."""
    with admin_engine.begin() as connection:
        connection.execute(text("""
            INSERT INTO events
                (stream_id, stream_version, event_id, event_type, schema_version, payload, transaction_id)
            VALUES ('email:restored', 1, gen_random_uuid(), 'DeliverySkipped', 1, '{}', '900000000000'::xid8)
        """))
    code, output = cli_outcome(env, "db", "check")
    assert code == 1
    assert "logical restore" in output


@pytest.mark.parametrize(
    ("url", "exit_code", "message"),
    [
        ("mysql://root@localhost/x", 78, "must start with postgresql://"),
        ("postgresql://someone:secret@127.0.0.1:1/nothing", 69, "database unavailable"),
    ],
)
def test_a_bad_database_url_is_one_clear_line_without_traceback(url: str, exit_code: int, message: str) -> None:
    result = subprocess.run(
        [AUTHLEDGER, "db", "check"], env=process_env({"DATABASE_URL": url}), capture_output=True, text=True
    )
    assert result.returncode == exit_code
    assert message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert "secret" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_an_unusable_data_directory_is_one_clear_line(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    env = process_env({"DATABASE_URL": None})
    result = subprocess.run(
        [AUTHLEDGER, "--data-dir", str(not_a_dir / "sub"), "db", "init"], env=env, capture_output=True, text=True
    )
    assert result.returncode == 78
    assert "is not writable" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_uninitialised_database_says_to_run_db_init(pg_server: Engine) -> None:
    with pg_server.connect() as connection:
        connection.execute(text("DROP DATABASE IF EXISTS empty_for_cli_test"))
        connection.execute(text("CREATE DATABASE empty_for_cli_test"))
    url = pg_server.url.set(database="empty_for_cli_test").render_as_string(hide_password=False)
    code, output = cli_outcome(cli_env(url.replace("+psycopg", "")), "db", "check")
    assert code == 69
    assert "authledger db init" in output


def test_bad_configuration_lists_every_bad_value(env: Env) -> None:
    result = run_cli({**env, "AUTHLEDGER_LEASE_SECONDS": "soon", "AUTHLEDGER_PROVIDER": "pigeon"}, "config", "show")
    assert result.exit_code == 78
    assert "AUTHLEDGER_LEASE_SECONDS must be a whole number" in result.output
    assert "AUTHLEDGER_PROVIDER must be one of" in result.output


def test_config_show_masks_secrets(env: Env) -> None:
    result = run_cli({"DATABASE_URL": "postgresql://u:hunter2@h/db"}, "config", "show", "--json")
    assert result.exit_code == 0
    shown = json.loads(result.output)
    assert shown["DATABASE_URL"] == {"value": "postgresql://***@h/db", "source": "environment"}
    assert "hunter2" not in result.output


def test_a_schema_older_than_the_code_says_to_run_db_init(env: Env, admin_engine: Engine) -> None:
    with admin_engine.begin() as connection:
        connection.execute(text("DROP TABLE email_outbox"))
    code, output = cli_outcome(env, "outbox", "status")
    assert code == 69
    assert "run `authledger db init`" in output
    assert "Traceback" not in output


def test_a_database_at_an_older_schema_version_is_told_to_upgrade_and_db_init_upgrades_it(
    env: Env, admin_engine: Engine
) -> None:
    with admin_engine.begin() as connection:  # what a version-1 schema.sql left behind
        connection.execute(text("DELETE FROM schema_version WHERE version >= 2"))
        connection.execute(text("REVOKE UPDATE (master_key_id, wrapped_key) ON subject_keys FROM authledger_app"))
        connection.execute(text("DROP TABLE address_index, console_sessions"))  # version 4's
        connection.execute(text("DROP INDEX delivery_messages_by_queued, delivery_messages_by_finished, "
                                "email_outbox_given_up"))
    code, output = cli_outcome(env, "db", "check")
    assert code == 1 and f"schema version is 1, this authledger expects {SCHEMA_VERSION}" in output

    code, output = cli_outcome(env, "db", "init")
    assert code == 0 and f"upgraded from schema version 1 (schema version {SCHEMA_VERSION})" in output
    assert cli_outcome(env, "db", "check")[0] == 0
    with admin_engine.connect() as connection:
        may_rewrap = connection.execute(text(
            "SELECT has_column_privilege('authledger_app', 'subject_keys', 'wrapped_key', 'UPDATE')"
        )).scalar_one()
    assert may_rewrap
    with admin_engine.connect() as connection:
        back = connection.execute(text(
            "SELECT count(*) FROM unnest(ARRAY['address_index', 'address_index_hashes', 'delivery_messages_by_queued', "
            "'delivery_messages_by_finished', 'email_outbox_given_up', 'console_sessions', "
            "'console_sessions_by_last_seen']) AS name WHERE to_regclass(name) IS NOT NULL"
        )).scalar_one()
        may_keep_sessions = connection.execute(text(
            "SELECT bool_and(has_table_privilege('authledger_app', 'console_sessions', p)) "
            "FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) AS p")).scalar_one()
    assert back == 7, "db init puts version 4's tables and indexes in place"
    assert may_keep_sessions, "the app role reads, opens, touches and ends console sessions"


def test_db_init_lets_a_version_3_database_count_rejected_presentations_and_is_idempotent(
    env: Env, admin_engine: Engine
) -> None:
    with admin_engine.begin() as connection:  # what schema.sql version 3 left behind
        connection.execute(text("DELETE FROM schema_version WHERE version >= 4"))
        connection.execute(text("ALTER TABLE request_counts DROP CONSTRAINT request_counts_answer_check"))
        connection.execute(text("ALTER TABLE request_counts ADD CONSTRAINT request_counts_answer_check "
                                "CHECK (answer IN ('refused', 'reused'))"))
    code, output = cli_outcome(env, "db", "init")
    assert code == 0 and f"upgraded from schema version 3 (schema version {SCHEMA_VERSION})" in output
    assert cli_outcome(env, "db", "init")[0] == 0, "a second init changes nothing"
    with admin_engine.begin() as connection:
        checks = connection.execute(text(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'request_counts'::regclass "
            "AND contype = 'c' AND conname = 'request_counts_answer_check'")).scalars().all()
        assert len(checks) == 1 and "rejected" in checks[0]
        connection.execute(text("""
            INSERT INTO request_counts
                (stream_id, answer, flow, user_id, window_start, first_at, last_at, count, clients)
            VALUES ('reset-user:1', 'rejected', 'reset', '1', now(), now(), now(), 1, '[]')
        """))


def test_db_check_accepts_a_schema_a_newer_release_applied(env: Env, admin_engine: Engine) -> None:
    with admin_engine.begin() as connection:
        connection.execute(text("INSERT INTO schema_version (version) VALUES (:newer)"), {"newer": SCHEMA_VERSION + 1})
    code, output = cli_outcome(env, "db", "check")
    assert code == 0, output


def test_db_url_masks_the_password_unless_asked_to_show_it() -> None:
    url = "postgresql://ada:s3cret@db.example:5432/auth"
    code, output = cli_outcome(cli_env(url), "db", "url")
    assert code == 0 and output == "postgresql://ada:***@db.example:5432/auth\n"
    code, output = cli_outcome(cli_env(url), "db", "url", "--show-password")
    assert code == 0 and output == url + "\n"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://ada:s3cret@db.example/auth?password=s3cret&sslpassword=s3cret&sslmode=require",
         "postgresql://ada:***@db.example/auth?password=***&sslpassword=***&sslmode=require"),
        ("postgresql://ada:s3/c?r#t@db.example/auth", "postgresql://ada:***@db.example/auth"),
        ("postgresql://ada:s3cr@t@db.example/auth", "postgresql://ada:***@db.example/auth"),
        ("postgresql://ada:s3cret@h1:5432,h2:5433/auth", "postgresql://ada:***@h1:5432,h2:5433/auth"),
    ],
)  # fmt: skip
def test_db_url_masks_every_form_of_password(url: str, shown: str) -> None:
    code, output = cli_outcome(cli_env(url), "db", "url")
    assert (code, output) == (0, shown + "\n")
    code, output = cli_outcome(cli_env(url), "db", "url", "--show-password")
    assert (code, output) == (0, url + "\n")


@pytest.mark.parametrize("command", [("db", "url"), ("db", "check")])
def test_a_libpq_key_value_string_is_refused_without_repeating_its_password(command: tuple[str, ...]) -> None:
    result = subprocess.run([AUTHLEDGER, *command], capture_output=True, text=True,
                            env=process_env({"DATABASE_URL": "host=db.example user=ada password=s3cret"}))
    assert result.returncode == 78
    assert "must start with postgresql://" in result.stderr
    assert "s3cret" not in result.stdout + result.stderr and "Traceback" not in result.stderr


def test_a_malformed_port_is_one_clear_line_without_the_password() -> None:
    result = subprocess.run([AUTHLEDGER, "db", "url"], capture_output=True, text=True,
                            env=process_env({"DATABASE_URL": "postgresql://ada:s3cret@db.example:port/auth"}))
    assert (result.returncode, result.stderr) == (78, "Error: database URL 'postgresql://***@db.example:port/auth' "
                                                      "is malformed\n")


def test_config_show_masks_a_password_holding_url_delimiters() -> None:
    result = run_cli({"DATABASE_URL": "postgresql://u:hun/ter?2#x@h/db?password=hunter2"}, "config", "show", "--json")
    assert result.exit_code == 0
    assert json.loads(result.output)["DATABASE_URL"]["value"] == "postgresql://***@h/db?***"
    assert "hun" not in result.output


def test_db_shell_runs_psql_on_the_configured_database(database_url: str) -> None:
    env = process_env({"DATABASE_URL": database_url})
    result = subprocess.run([AUTHLEDGER, "db", "shell", "-tA", "-c", "SELECT max(version) FROM schema_version"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(SCHEMA_VERSION)


def test_db_shell_without_psql_on_path_uses_the_one_shipped_with_the_embedded_server(
    database_url: str, tmp_path: Path
) -> None:
    env = process_env({"DATABASE_URL": database_url, "PATH": str(tmp_path)})
    result = subprocess.run([AUTHLEDGER, "db", "shell", "-tA", "-c", "SELECT 41 + 1"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "42", result.stderr


def test_db_shell_says_clearly_when_no_psql_exists(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("commands.db.psql_program", lambda: None)
    code, output = cli_outcome(env, "db", "shell")
    assert code == 1 and output.startswith("Error: psql is not installed: install the PostgreSQL client")


def test_config_show_names_the_source_of_every_value_and_what_stands_in_for_unset_ones(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    unset = {"DATABASE_URL": None, "AUTHLEDGER_OTP_TTL": "300", "AUTHLEDGER_TOKEN_KEYS": None,
             "AUTHLEDGER_MASTER_KEY": None, "AUTHLEDGER_SMTP_URL": None}
    result = run_cli(unset, "--data-dir", str(data_dir), "config", "show", "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["AUTHLEDGER_DATA_DIR"] == {"value": str(data_dir), "source": "command line"}
    assert shown["AUTHLEDGER_OTP_TTL"] == {"value": 300, "source": "environment"}
    assert shown["AUTHLEDGER_RESET_TTL"] == {"value": 1800, "source": "default"}
    assert shown["DATABASE_URL"] == {"value": f"embedded PostgreSQL in {data_dir / 'pgdata'}",
                                     "source": "embedded database: `authledger db url`"}
    assert shown["AUTHLEDGER_TOKEN_KEYS"] == {"value": f"*** from {data_dir / 'dev-token-key'}",
                                              "source": "generated development key file"}
    assert shown["AUTHLEDGER_MASTER_KEY"]["source"] == "generated development key file"
    assert shown["AUTHLEDGER_SMTP_URL"] == {"value": None, "source": "default"}
    assert not (data_dir / "pgdata").exists(), "showing the configuration starts no database"

    text = run_cli({"DATABASE_URL": None}, "--data-dir", str(data_dir), "config", "show")
    assert "None" not in text.output
    assert any(line.startswith("DATABASE_URL=embedded PostgreSQL in") and line.endswith("# embedded database: "
               "`authledger db url`") for line in text.output.splitlines())
