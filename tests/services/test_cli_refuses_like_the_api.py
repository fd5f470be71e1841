"""The command line refuses a tenant that does not exist, as the HTTP API (whose keys belong to one) does.

Non-ASCII ids and keys, refused alike by both: tests/http/test_refused_alike.py.
"""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import Engine

from tests.http.support import log_size
from tests.support.cli import Env, run_cli

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


@pytest.mark.parametrize("words", COMMANDS_WITH_A_TENANT, ids=lambda words: " ".join(words[:2]))
def test_every_command_with_a_tenant_refuses_one_that_does_not_exist_and_writes_nothing(
    env: Env, engine: Engine, words: list[str]
) -> None:
    before = log_size(engine)

    result = run_cli(env, *words, "--tenant", UNKNOWN)

    assert result.exit_code == 2, result.output
    assert f"no tenant named '{UNKNOWN}'; create it with `authledger tenants create {UNKNOWN}`" in result.stderr
    assert "Traceback" not in result.output
    assert log_size(engine) == before


def test_a_tenant_once_created_is_taken(env: Env) -> None:
    assert run_cli(env, "tenants", "create", "acme").exit_code == 0
    result = run_cli(env, "reset", "request", "--tenant", "acme", "--user-id", "u1", "--email", "ada@example.test")
    assert result.exit_code == 0, result.output
