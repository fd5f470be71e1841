"""`config show` reports what the running service would do, not only what the variables say."""

from __future__ import annotations

from infra.config.settings import Settings
from infra.http.serve import reset_page_enabled
from tests.support.cli import Env, cli_env, cli_outcome

EXTERNAL = "postgresql://db.example/authledger"


def shown(env: Env, variable: str) -> str:
    """The line of ``config show`` that tells ``variable``."""
    code, output = cli_outcome(env, "config", "show")
    assert code == 0, output
    [line] = [line for line in output.splitlines() if line.startswith(variable + "=")]
    return line


def test_config_show_reports_the_development_reset_page_on_where_serve_serves_it() -> None:
    for told in (None, "0", "1"):
        line = shown(cli_env(None, AUTHLEDGER_DEV_RESET_PAGE=told), "AUTHLEDGER_DEV_RESET_PAGE")
        assert line.startswith("AUTHLEDGER_DEV_RESET_PAGE=True ") and "always on for the embedded default" in line
    assert reset_page_enabled(Settings(), embedded=True)


def test_config_show_reports_the_development_reset_page_as_told_with_a_database_url() -> None:
    assert shown(cli_env(EXTERNAL), "AUTHLEDGER_DEV_RESET_PAGE").startswith("AUTHLEDGER_DEV_RESET_PAGE=False ")
    on = shown(cli_env(EXTERNAL, AUTHLEDGER_DEV_RESET_PAGE="1"), "AUTHLEDGER_DEV_RESET_PAGE")
    assert on.startswith("AUTHLEDGER_DEV_RESET_PAGE=True ") and on.endswith("# environment")
    assert reset_page_enabled(Settings(database_url=EXTERNAL, dev_reset_page=True), embedded=False)
