"""Every hostile address is refused by `reset request` and `otp request`: exit 2, a clear line, nothing written."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, text

from tests.support.addresses import ACCEPTED, HOSTILE, assert_mentions_no_address
from tests.support.cli import Env, cli_outcome
from tests.support.replay import assert_projections_match_log

REQUESTS = {"reset": ["reset", "request"], "otp": ["otp", "request", "--purpose", "login"]}


def log_size(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(text("SELECT count(*) FROM events")).scalar_one()


@pytest.mark.parametrize("command", list(REQUESTS))
@pytest.mark.parametrize("address", HOSTILE)
def test_a_hostile_address_exits_2_naming_the_rule_and_writes_nothing(
    env: Env, engine: Engine, command: str, address: str
) -> None:
    before = log_size(engine)

    code, output = cli_outcome(env, *REQUESTS[command], "--user-id", "42", "--email", address)

    assert code == 2, output
    [line] = output.splitlines()
    assert line.startswith("Error: recipient must be a single plain email address like name@example.com: ")
    assert "Traceback" not in output
    assert_mentions_no_address(output, address)
    assert log_size(engine) == before


@pytest.mark.parametrize("command", list(REQUESTS))
@pytest.mark.parametrize("address", ACCEPTED[:3])
def test_an_accepted_address_queues_an_email(env: Env, engine: Engine, command: str, address: str) -> None:
    code, output = cli_outcome(env, *REQUESTS[command], "--user-id", "42", "--email", address)

    assert code == 0, output
    assert_projections_match_log(engine)
