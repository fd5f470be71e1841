"""The command line refuses a tenant that does not exist, as the HTTP API (whose keys belong to one) does.

Non-ASCII ids and keys, refused alike by both: tests/http/test_refused_alike.py.
"""

from __future__ import annotations

import base64
import uuid

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine

from cli import cli
from tests.http.support import log_size

KEYS = "k1:" + base64.urlsafe_b64encode(b"t" * 32).decode().rstrip("=")
SOME_ID = str(uuid.uuid4())
UNKNOWN = "nope"

COMMANDS_WITH_A_TENANT = [
    ["reset", "request", "--user-id", "u1", "--email", "ada@example.test"],
    ["reset", "verify", "x" * 43],
    ["reset", "consume", "x" * 43],
    ["otp", "request", "--user-id", "u1", "--email", "ada@example.test"],
    ["otp", "verify", "--user-id", "u1", SOME_ID, "123456"],
    ["history", "--user-id", "u1"],
    ["explain", "--request-id", SOME_ID],
    ["privacy", "forget", "--user-id", "u1", "--reason", "ticket 7", "--yes"],
    ["clients", "create", "web", "--scope", "send"],
    ["clients", "rotate", "web"],
    ["clients", "revoke", "web"],
    ["clients", "list"],
]


@pytest.fixture
def env(database_url: str) -> dict[str, str]:
    return {"DATABASE_URL": database_url, "AUTHLEDGER_TOKEN_KEYS": KEYS, "AUTHLEDGER_LOG_FORMAT": "json"}


@pytest.mark.parametrize("words", COMMANDS_WITH_A_TENANT, ids=lambda words: " ".join(words[:2]))
def test_every_command_with_a_tenant_refuses_one_that_does_not_exist_and_writes_nothing(
    env: dict[str, str], engine: Engine, words: list[str]
) -> None:
    before = log_size(engine)

    result = CliRunner().invoke(cli, [*words, "--tenant", UNKNOWN], env=env)

    assert result.exit_code == 2, result.output
    assert f"no tenant named '{UNKNOWN}'; create it with `authledger tenants create {UNKNOWN}`" in result.stderr
    assert "Traceback" not in result.output
    assert log_size(engine) == before


def test_a_tenant_once_created_is_taken(env: dict[str, str]) -> None:
    assert CliRunner().invoke(cli, ["tenants", "create", "acme"], env=env).exit_code == 0
    result = CliRunner().invoke(
        cli, ["reset", "request", "--tenant", "acme", "--user-id", "u1", "--email", "ada@example.test"], env=env)
    assert result.exit_code == 0, result.output
