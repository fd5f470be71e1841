"""Every hostile address is refused by `reset request` and `otp request`: exit 2, a clear line, nothing written."""

from __future__ import annotations

import base64

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, text

from cli import cli
from tests.support.addresses import ACCEPTED, HOSTILE, assert_mentions_no_address
from tests.support.replay import assert_projections_match_log

KEYS = "k1:" + base64.urlsafe_b64encode(b"s" * 32).decode().rstrip("=")
REQUESTS = {"reset": ["reset", "request"], "otp": ["otp", "request", "--purpose", "login"]}


def log_size(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(text("SELECT count(*) FROM events")).scalar_one()


def run(database_url: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), env={"DATABASE_URL": database_url, "AUTHLEDGER_TOKEN_KEYS": KEYS})
    return result.exit_code, result.output


@pytest.mark.parametrize("command", list(REQUESTS))
@pytest.mark.parametrize("address", HOSTILE)
def test_a_hostile_address_exits_2_naming_the_rule_and_writes_nothing(
    database_url: str, engine: Engine, command: str, address: str
) -> None:
    before = log_size(engine)

    code, output = run(database_url, *REQUESTS[command], "--user-id", "42", "--email", address)

    assert code == 2, output
    [line] = output.splitlines()
    assert line.startswith("Error: recipient must be a single plain email address like name@example.com: ")
    assert "Traceback" not in output
    assert_mentions_no_address(output, address)
    assert log_size(engine) == before


@pytest.mark.parametrize("command", list(REQUESTS))
@pytest.mark.parametrize("address", ACCEPTED[:3])
def test_an_accepted_address_queues_an_email(database_url: str, engine: Engine, command: str, address: str) -> None:
    code, output = run(database_url, *REQUESTS[command], "--user-id", "42", "--email", address)

    assert code == 0, output
    assert_projections_match_log(engine)
