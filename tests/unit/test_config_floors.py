"""Standards floors at start-up, and URL settings shown masked (issue 14, items 6 and 7).

Each floor is refused in one line naming its variable, every violation at
once, before anything starts: `config show`, `serve` and `worker` refuse the
same way, with the configuration exit code and no traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from domain.errors import ConfigError
from infra.config.settings import load_settings
from infra.config.values import is_loopback, mask_passwords, mask_url
from infra.db.engine import Database
from tests.support.cli import process_env, run_cli

AUTHLEDGER = str(Path(sys.executable).parent / "authledger")
CONFIG = ConfigError.exit_code

FLOORS = [
    ("AUTHLEDGER_OTP_DIGITS", "4",
     "must be between 6 and 10 (NIST SP 800-63B: at least 6 digits), got 4"),
    ("AUTHLEDGER_OTP_DIGITS", "5",
     "must be between 6 and 10 (NIST SP 800-63B: at least 6 digits), got 5"),
    ("AUTHLEDGER_OTP_ACCOUNT_LOCK_FAILURES", "101",
     "must be between 1 and 100 (NIST SP 800-63B: at most 100 consecutive failures), got 101"),
    ("AUTHLEDGER_RESET_URL", "http://app.example/reset",
     "must use https:// (http:// only for localhost or a loopback address), got 'http://app.example/reset'"),
    ("AUTHLEDGER_HTTP_PROVIDER_URL", "http://mail.example/send",
     "must use https:// (http:// only for localhost or a loopback address), got 'http://mail.example/send'"),
    ("AUTHLEDGER_SMTP_URL", "smtp://mail.example:25",
     "must use TLS (smtps:// or smtp+starttls://; plain smtp:// only for localhost or a loopback address), "
     "got 'smtp://mail.example:25'"),
]  # fmt: skip


@pytest.mark.parametrize(("variable", "value", "said"), FLOORS)
@pytest.mark.parametrize("words", [["config", "show"], ["serve", "--port", "1"], ["worker", "--once"]])
def test_each_floor_is_refused_in_one_line_by_every_command_before_anything_starts(
    words: list[str], variable: str, value: str, said: str, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"

    result = run_cli({"AUTHLEDGER_DATA_DIR": str(data_dir), variable: value}, *words)

    assert result.exit_code == CONFIG
    assert result.output == f"Error: invalid configuration:\n  {variable} {said}\n"
    assert not data_dir.exists(), "no embedded server, key or Maildir was made"


def test_every_floor_violated_at_once_is_reported_at_once_in_declaration_order() -> None:
    env = {variable: value for variable, value, _ in FLOORS}

    result = run_cli(env, "config", "show")

    assert result.exit_code == CONFIG
    lines = result.output.splitlines()
    assert lines[0] == "Error: invalid configuration:"
    assert [line.split()[0] for line in lines[1:]] == [
        "AUTHLEDGER_SMTP_URL", "AUTHLEDGER_HTTP_PROVIDER_URL", "AUTHLEDGER_RESET_URL",
        "AUTHLEDGER_OTP_DIGITS", "AUTHLEDGER_OTP_ACCOUNT_LOCK_FAILURES",
    ]  # fmt: skip
    assert "Traceback" not in result.output


def test_the_real_command_refuses_with_the_config_exit_code_and_no_traceback(tmp_path: Path) -> None:
    env = process_env({"AUTHLEDGER_DATA_DIR": str(tmp_path / "data"), "AUTHLEDGER_OTP_DIGITS": "4",
           "AUTHLEDGER_RESET_URL": "http://app.example/reset"})  # fmt: skip
    env.pop("DATABASE_URL", None)

    done = subprocess.run([AUTHLEDGER, "serve", "--port", "1"], env=env, capture_output=True, text=True,
                          timeout=60, check=False)

    assert done.returncode == CONFIG
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "Error: invalid configuration:",
        "  AUTHLEDGER_RESET_URL must use https:// (http:// only for localhost or a loopback address), "
        "got 'http://app.example/reset'",
        "  AUTHLEDGER_OTP_DIGITS must be between 6 and 10 (NIST SP 800-63B: at least 6 digits), got 4",
    ]  # fmt: skip
    assert not (tmp_path / "data").exists()


def test_the_embedded_defaults_pass_every_floor() -> None:
    result = run_cli({}, "config", "show", "--json")

    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["AUTHLEDGER_RESET_URL"]["value"] == "http://localhost:8000/reset"
    assert (shown["AUTHLEDGER_OTP_DIGITS"]["value"], shown["AUTHLEDGER_OTP_ACCOUNT_LOCK_FAILURES"]["value"]) == (6, 100)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("AUTHLEDGER_OTP_DIGITS", "6"), ("AUTHLEDGER_OTP_DIGITS", "10"),
        ("AUTHLEDGER_OTP_ACCOUNT_LOCK_FAILURES", "100"),
        ("AUTHLEDGER_RESET_URL", "https://app.example/reset"),
        ("AUTHLEDGER_RESET_URL", "http://127.0.0.1:8000/reset"),
        ("AUTHLEDGER_RESET_URL", "http://[::1]:8000/reset"),
        ("AUTHLEDGER_RESET_URL", "http://app.localhost/reset"),
        ("AUTHLEDGER_HTTP_PROVIDER_URL", "https://api.mail.example/v1/send"),
        ("AUTHLEDGER_HTTP_PROVIDER_URL", "http://127.0.0.1:9000/emails"),
        ("AUTHLEDGER_SMTP_URL", "smtps://user:pass@mail.example"),
        ("AUTHLEDGER_SMTP_URL", "smtp+starttls://user:pass@mail.example:587"),
        ("AUTHLEDGER_SMTP_URL", "smtp://localhost:2525"),
        ("AUTHLEDGER_SMTP_URL", "smtp://127.0.0.2:25"),
    ],
)  # fmt: skip
def test_values_at_or_above_the_floor_are_taken(variable: str, value: str) -> None:
    assert load_settings({variable: value}) is not None


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("AUTHLEDGER_RESET_URL", "ftp://app.example/reset", "must be a URL with a host, starting with http:// "
         "or https://; got 'ftp://app.example/reset'"),
        ("AUTHLEDGER_RESET_URL", "https:///reset", "must be a URL with a host, starting with http:// or https://; "
         "got 'https:///reset'"),
        ("AUTHLEDGER_SMTP_URL", "smtp://mail.example:port", "must be a URL with a host, starting with smtp://, "
         "smtp+starttls:// or smtps://; got 'smtp://mail.example:port'"),
        # A host that merely starts like a loopback one is not one.
        ("AUTHLEDGER_SMTP_URL", "smtp://localhost.example.com", "must use TLS (smtps:// or smtp+starttls://; "
         "plain smtp:// only for localhost or a loopback address), got 'smtp://localhost.example.com'"),
        ("AUTHLEDGER_HTTP_PROVIDER_URL", "http://127.0.0.1.nip.io/send", "must use https:// (http:// only for "
         "localhost or a loopback address), got 'http://127.0.0.1.nip.io/send'"),
    ],
)  # fmt: skip
def test_a_malformed_or_lookalike_url_is_refused(variable: str, value: str, said: str) -> None:
    result = run_cli({variable: value}, "config", "show")

    assert result.exit_code == CONFIG
    assert result.output == f"Error: invalid configuration:\n  {variable} {said}\n"


def test_a_refused_url_is_quoted_masked_never_with_its_credentials() -> None:
    result = run_cli({
        "AUTHLEDGER_HTTP_PROVIDER_URL": "http://apikey:hunter2@mail.example/send?token=s3cret",
        "AUTHLEDGER_SMTP_URL": "smtp://ada:hunter2@mail.example",
    }, "config", "show")  # fmt: skip

    assert result.exit_code == CONFIG
    assert "'http://***@mail.example/send?***'" in result.output
    assert "'smtp://***@mail.example'" in result.output
    assert "hunter2" not in result.output and "s3cret" not in result.output and "apikey" not in result.output


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:pass@host/path?key=abc", "https://***@host/path?***"),
        ("https://host.example/path", "https://host.example/path"),
        ("https://token@host.example", "https://***@host.example"),
        ("http://host:8080/p?a=1#frag", "http://host:8080/p?***#***"),
        ("https://a@b@host/x", "https://***@host/x"),
        ("postgresql://ada:s3cret@db.example:5432/auth?sslmode=require", "postgresql://***@db.example:5432/auth?***"),
        ("not a url with s3cret", "***"),
        ("postgresql://ada:s3/cret@db.example/auth", "postgresql://***@db.example/auth"),
        ("postgresql://ada:s3?cret#x@db.example/auth", "postgresql://***@db.example/auth"),
        ("postgresql://ada:s3@cret@db.example/auth", "postgresql://***@db.example/auth"),
        ("postgresql://ada:s3cret@h1:5432,h2:5433/auth", "postgresql://***@h1:5432,h2:5433/auth"),
        ("host=db.example password=s3cret", "***"),
    ],
)  # fmt: skip
def test_a_url_is_masked_in_its_userinfo_query_and_fragment(url: str, shown: str) -> None:
    assert mask_url(url) == shown


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("localhost", True), ("LOCALHOST.", True), ("app.localhost", True), ("127.0.0.1", True),
     ("127.8.9.10", True), ("::1", True), ("localhost.example.com", False), ("10.0.0.1", False),
     ("example.com", False), (None, False), ("", False)],
)  # fmt: skip
def test_loopback_means_this_machine_by_name_or_address(host: str | None, loopback: bool) -> None:
    assert is_loopback(host) is loopback


URL_SETTINGS = {
    "DATABASE_URL": ("postgresql://ada:s3cret@db.example:5432/auth?password=s3cret",
                     "postgresql://***@db.example:5432/auth?***"),
    "AUTHLEDGER_SMTP_URL": ("smtps://ada:s3cret@mail.example:465", "smtps://***@mail.example:465"),
    "AUTHLEDGER_HTTP_PROVIDER_URL": ("https://key:s3cret@api.mail.example/v1/send?api_key=s3cret",
                                     "https://***@api.mail.example/v1/send?***"),
    "AUTHLEDGER_RESET_URL": ("https://ada:s3cret@app.example/reset?tenant=s3cret#s3cret",
                             "https://***@app.example/reset?***#***"),
}


def test_config_show_masks_every_url_setting_in_json() -> None:
    result = run_cli({variable: url for variable, (url, _) in URL_SETTINGS.items()}, "config", "show", "--json")

    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert {variable: shown[variable] for variable in URL_SETTINGS} == {
        variable: {"value": masked, "source": "environment"} for variable, (_, masked) in URL_SETTINGS.items()
    }
    assert "s3cret" not in result.output and "ada" not in result.output


def test_config_show_masks_every_url_setting_in_text() -> None:
    result = run_cli({variable: url for variable, (url, _) in URL_SETTINGS.items()}, "config", "show")

    assert result.exit_code == 0, result.output
    for variable, (_, masked) in URL_SETTINGS.items():
        [line] = [line for line in result.output.splitlines() if line.startswith(variable + "=")]
        value, _, source = line.removeprefix(variable + "=").partition("  # ")
        assert (value.rstrip(), source) == (masked, "environment")
    assert "s3cret" not in result.output and "ada" not in result.output


def test_a_url_given_on_the_command_line_is_masked_as_well() -> None:
    result = run_cli({}, "--database-url", "postgresql://ada:s3cret@db.example/auth", "config", "show", "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["DATABASE_URL"] == {"value": "postgresql://***@db.example/auth",
                                                          "source": "command line"}


def test_a_database_url_refused_by_the_engine_is_quoted_masked() -> None:
    result = run_cli({"DATABASE_URL": "mysql://ada:s3cret@db.example/auth?key=s3cret"}, "db", "check")

    assert result.exit_code == CONFIG
    assert result.output == ("Error: database URL 'mysql://***@db.example/auth?***' must start with "
                             "postgresql://\n")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://ada:s3cret@db.example:5432/auth", "postgresql://ada:***@db.example:5432/auth"),
        ("postgresql://ada@db.example/auth?password=s3cret", "postgresql://ada@db.example/auth?password=***"),
        ("postgresql://ada@db.example/auth?sslmode=verify-full&sslpassword=s3cret&sslkey=/k.pem",
         "postgresql://ada@db.example/auth?sslmode=verify-full&sslpassword=***&sslkey=/k.pem"),
        ("postgresql://ada@db.example/auth?pass%77ord=s3cret", "postgresql://ada@db.example/auth?pass%77ord=***"),
        ("postgresql://ada@db.example/auth?oauth_client_secret=s3cret&s3cret",
         "postgresql://ada@db.example/auth?oauth_client_secret=***&***"),
        ("postgresql://ada:s3cret@h1:5432,h2:5433/auth?target_session_attrs=read-write",
         "postgresql://ada:***@h1:5432,h2:5433/auth?target_session_attrs=read-write"),
        ("postgresql://ada:s3/c?r#e@db.example/auth", "postgresql://ada:***@db.example/auth"),
        ("postgresql://ada:s3cr@t@db.example/auth", "postgresql://ada:***@db.example/auth"),
        ("postgresql:///auth?host=/run/pg&password=s3cret", "postgresql:///auth?host=/run/pg&password=***"),
        ("postgresql://ada:s3cret@db.example/auth#s3cret", "postgresql://ada:***@db.example/auth#***"),
        ("host=db.example user=ada password=s3cret", "***"),
        ("postgresql://postgres:@/postgres?host=/data/pgdata&password=", "postgresql://postgres:@/postgres?host=/data/pgdata&password="),
    ],
)  # fmt: skip
def test_a_database_url_shown_for_tools_masks_every_form_of_password(url: str, shown: str) -> None:
    assert mask_passwords(url) == shown


def test_a_multi_host_url_reaches_every_host_and_psql_gets_it_back_as_given() -> None:
    url = "postgresql://ada:s3cret@h1:5432,h2:5433/auth?target_session_attrs=read-write"
    database = Database.locate(url, Path("unused"))

    engine = database.engine()
    _, arguments = engine.dialect.create_connect_args(engine.url)
    assert (arguments["host"], arguments["port"], arguments["password"]) == ("h1,h2", "5432,5433", "s3cret")
    assert database.plain_url == url
    assert database.tool_url == "postgresql://ada:***@h1:5432,h2:5433/auth?target_session_attrs=read-write"
    assert "s3cret" not in repr(database)


def test_the_database_url_in_messages_is_masked_and_db_url_keeps_the_form_other_tools_take() -> None:
    database = Database("postgresql+psycopg://ada:s3cret@db.example:5432/auth?sslmode=require")

    assert database.display_url == "postgresql://***@db.example:5432/auth?***"
    assert database.tool_url == "postgresql://ada:***@db.example:5432/auth?sslmode=require"
