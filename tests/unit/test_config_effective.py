"""`config show` reports what the running service would do, not only what the variables say."""

from __future__ import annotations

from click.testing import CliRunner

from cli import cli
from infra.config.settings import Settings
from infra.http.serve import reset_page_enabled


def shown(env: dict[str, str | None], variable: str) -> str:
    result = CliRunner().invoke(cli, ["config", "show"], env=env)
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.output.splitlines() if line.startswith(variable + "=")]
    return line


def test_config_show_reports_the_development_reset_page_on_where_serve_serves_it() -> None:
    embedded = {"DATABASE_URL": None}
    for told in (None, "0", "1"):
        line = shown({**embedded, "AUTHLEDGER_DEV_RESET_PAGE": told}, "AUTHLEDGER_DEV_RESET_PAGE")
        assert line.startswith("AUTHLEDGER_DEV_RESET_PAGE=True ") and "always on for the embedded default" in line
    assert reset_page_enabled(Settings(), embedded=True)


def test_config_show_reports_the_development_reset_page_as_told_with_a_database_url() -> None:
    external = {"DATABASE_URL": "postgresql://db.example/authledger"}
    assert shown(external, "AUTHLEDGER_DEV_RESET_PAGE").startswith("AUTHLEDGER_DEV_RESET_PAGE=False ")
    on = shown({**external, "AUTHLEDGER_DEV_RESET_PAGE": "1"}, "AUTHLEDGER_DEV_RESET_PAGE")
    assert on.startswith("AUTHLEDGER_DEV_RESET_PAGE=True ") and on.endswith("# environment")
    assert reset_page_enabled(Settings(database_url="postgresql://db.example/authledger", dev_reset_page=True),
                              embedded=False)
