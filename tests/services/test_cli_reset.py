"""The reset flow and the worker through the real `authledger` command."""

from __future__ import annotations

import base64
import json
import mailbox
import os
import signal
import subprocess
import sys
import time
from email.message import Message
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine

from cli import cli
from infra.bootstrap import App
from tests.support.log_reading import email_event_types

AUTHLEDGER = str(Path(sys.executable).parent / "authledger")
KEYS = "k1:" + base64.urlsafe_b64encode(b"s" * 32).decode().rstrip("=")


@pytest.fixture
def env(database_url: str, tmp_path: Path) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "AUTHLEDGER_TOKEN_KEYS": KEYS,
        "AUTHLEDGER_MAILDIR": str(tmp_path / "maildir"),
        "AUTHLEDGER_RESET_URL": "https://app.test/reset",
        "AUTHLEDGER_LOG_FORMAT": "json",
    }


def run(env: dict[str, str], *args: str) -> tuple[int, str]:
    """Exit code, and stdout on success or everything printed on failure (logs go to stderr)."""
    result = CliRunner().invoke(cli, list(args), env=env)
    return result.exit_code, result.stdout if result.exit_code == 0 else result.output


def delivered(env: dict[str, str]) -> list[Message]:
    return list(mailbox.Maildir(env["AUTHLEDGER_MAILDIR"], create=False))


def token_of(message: Message) -> str:
    text = next(part for part in message.walk() if part.get_content_type() == "text/plain")
    body = text.get_payload(decode=True).decode()
    link = next(line for line in body.splitlines() if line.startswith("https://app.test/reset?"))
    return parse_qs(urlsplit(link).query)["token"][0]


def test_request_deliver_verify_and_consume_from_the_command_line(env: dict[str, str]) -> None:
    code, output = run(env, "reset", "request", "--user-id", "42", "--email", "ada@example.test", "--json")
    assert code == 0, output
    answer = json.loads(output)
    assert set(answer) >= {"request_id", "message_id", "expires_at", "reused"} and answer["reused"] is False

    code, output = run(env, "worker", "--once", "--json")
    assert code == 0 and json.loads(output) == {"sent": 1}
    [message] = delivered(env)
    assert message["Message-ID"] == f"<{answer['message_id']}@authledger>"
    token = token_of(message)

    code, output = run(env, "reset", "verify", token, "--json")
    assert code == 0 and json.loads(output)["request_id"] == answer["request_id"]
    code, output = run(env, "reset", "consume", token, "--json")
    assert code == 0 and json.loads(output)["consumed"] is True
    code, output = run(env, "reset", "consume", token)
    assert code == 4 and "already used" in output and token not in output

    code, output = run(env, "outbox", "status", "--json")
    assert json.loads(output)["by_state"]["pending"] == 1, "the password-changed notice is queued"


def test_a_tenants_link_is_verified_and_consumed_only_for_that_tenant(env: dict[str, str]) -> None:
    for tenant in ("acme", "shop"):  # tenants that exist: the command line refuses others
        assert run(env, "tenants", "create", tenant)[0] == 0
    code, output = run(env, "reset", "request", "--tenant", "acme", "--user-id", "u1", "--email", "ada@example.test")
    assert code == 0, output
    assert run(env, "worker", "--once")[0] == 0
    [message] = delivered(env)
    token = token_of(message)

    for command in ("verify", "consume"):
        for tenant in ([], ["--tenant", "shop"]):
            assert run(env, "reset", command, *tenant, token) == (4, "Error: The reset link is not valid.\n")
    code, output = run(env, "reset", "verify", "--tenant", "acme", token, "--json")
    assert code == 0 and json.loads(output)["user_id"] == "u1", "the tenant's own id, not the scoped one"
    code, output = run(env, "reset", "consume", "--tenant", "acme", token)
    assert code == 0 and " of user u1;" in output


def test_a_token_that_begins_with_a_dash_is_read_as_the_token_not_as_an_option(env: dict[str, str]) -> None:
    # Base64url: one token in 64 begins with "-". Unknown, it is refused as a link, not as a usage error.
    dashed = "-" + "A" * 42
    for command in ("verify", "consume"):
        assert run(env, "reset", command, dashed) == (4, "Error: The reset link is not valid.\n")
        assert run(env, "reset", command, "--json", dashed)[0] == 4
    code, output = run(env, "reset", "verify", "--jsn", dashed)
    assert code == 2 and "--jsn" in output and dashed not in output, "a mistyped option is still refused"


def test_the_second_request_within_the_cooldown_is_reused(env: dict[str, str]) -> None:
    first = json.loads(run(env, "reset", "request", "--user-id", "1", "--email", "a@example.test", "--json")[1])
    again = json.loads(run(env, "reset", "request", "--user-id", "1", "--email", "a@example.test", "--json")[1])
    assert again["reused"] is True and again["request_id"] == first["request_id"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["reset", "request", "--user-id", "", "--email", "a@example.test"], "user"),
        (["reset", "request", "--user-id", "1", "--email", "not-an-address"], "@"),
        (["reset", "request", "--user-id", "1", "--email", "a@example.test\r\nBcc: x@evil.test"], "recipient"),
        (["reset", "verify", "nonsense"], "not valid"),
        (["worker", "--inflight", "0"], "0"),
    ],
)
def test_bad_input_is_one_clear_line_and_writes_nothing(
    env: dict[str, str], engine: Engine, args: list[str], message: str
) -> None:
    code, output = run(env, *args)
    assert code != 0
    assert message in output
    assert "Traceback" not in output
    code, output = run(env, "outbox", "status", "--json")
    assert sum(json.loads(output)["by_state"].values()) == 0


def test_a_worker_stops_cleanly_on_sigterm_and_logs_every_delivery(env: dict[str, str], engine: Engine) -> None:
    answer = json.loads(run(env, "reset", "request", "--user-id", "9", "--email", "z@example.test", "--json")[1])
    worker = subprocess.Popen(
        [AUTHLEDGER, "worker", "--inflight", "2"], env={**os.environ, **env},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 20
    while not (Path(env["AUTHLEDGER_MAILDIR"]) / "new").exists() or not delivered(env):
        assert time.monotonic() < deadline, "the worker never delivered"
        time.sleep(0.1)
    time.sleep(0.3)
    worker.send_signal(signal.SIGTERM)
    _, stderr = worker.communicate(timeout=15)
    assert worker.returncode == 0, stderr

    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    [sent] = [line for line in lines if line.get("event") == "delivery accepted"]
    assert sent["message_id"] == answer["message_id"]
    for field in ("lease_owner", "lease_expires_at", "key_id", "request_id", "provider_message_id"):
        assert sent[field], field
    assert any(line.get("event") == "worker stopped" for line in lines)
    token = token_of(delivered(env)[0])
    assert token not in stderr
    assert email_event_types(engine, answer["message_id"]) == ["EmailQueued", "LeaseClaimed", "ProviderAccepted"]


def test_a_lease_that_cannot_outlast_the_provider_timeout_is_refused_at_start(env: dict[str, str]) -> None:
    code, output = run({**env, "AUTHLEDGER_LEASE_SECONDS": "10", "AUTHLEDGER_PROVIDER_TIMEOUT": "10"}, "worker", "--once")
    assert code == 78
    assert "AUTHLEDGER_LEASE_SECONDS (10) must exceed AUTHLEDGER_PROVIDER_TIMEOUT" in output



def test_the_pool_grows_with_the_delivery_threads(env: dict[str, str]) -> None:
    """Each delivery thread holds a connection across its send; 24 threads must not queue for 10."""
    app = App.from_environment(env)
    app.reserve_connections(24)
    try:
        assert app.engine.pool.size() >= 26
    finally:
        app.close()


def test_a_worker_without_a_master_key_refuses_to_start(env: dict[str, str]) -> None:
    code, output = run({**env, "AUTHLEDGER_MASTER_KEY": ""}, "worker", "--once")
    assert code == 78
    assert "AUTHLEDGER_MASTER_KEY is required" in output
