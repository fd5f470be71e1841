"""The reset flow and the worker through the real `authledger` command."""

from __future__ import annotations

import json
import mailbox
import signal
import subprocess
import sys
from email.message import Message
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlalchemy import Engine

from infra.bootstrap import App
from tests.support.cli import Env, cli_outcome, process_env
from tests.support.log_reading import email_event_types
from tests.support.waiting import wait_until

AUTHLEDGER = str(Path(sys.executable).parent / "authledger")
def delivered(env: Env) -> list[Message]:
    return list(mailbox.Maildir(env["AUTHLEDGER_MAILDIR"], create=False))


def token_of(message: Message) -> str:
    text = next(part for part in message.walk() if part.get_content_type() == "text/plain")
    body = text.get_payload(decode=True).decode()
    link = next(line for line in body.splitlines() if line.startswith("https://app.test/reset?"))
    return parse_qs(urlsplit(link).query)["token"][0]


def test_request_deliver_verify_and_consume_from_the_command_line(env: Env) -> None:
    code, output = cli_outcome(env, "reset", "request", "--user-id", "42", "--email", "ada@example.test", "--json")
    assert code == 0, output
    answer = json.loads(output)
    assert set(answer) >= {"request_id", "message_id", "expires_at", "reused"} and answer["reused"] is False

    code, output = cli_outcome(env, "worker", "--once", "--json")
    assert code == 0 and json.loads(output) == {"sent": 1}
    [message] = delivered(env)
    assert message["Message-ID"] == f"<{answer['message_id']}@authledger>"
    token = token_of(message)

    code, output = cli_outcome(env, "reset", "verify", token, "--json")
    assert code == 0 and json.loads(output)["request_id"] == answer["request_id"]
    code, output = cli_outcome(env, "reset", "consume", token, "--json")
    assert code == 0 and json.loads(output)["consumed"] is True
    code, output = cli_outcome(env, "reset", "consume", token)
    assert code == 4 and "already used" in output and token not in output

    code, output = cli_outcome(env, "outbox", "status", "--json")
    assert json.loads(output)["by_state"]["pending"] == 1, "the password-changed notice is queued"


def test_a_tenants_link_is_verified_and_consumed_only_for_that_tenant(env: Env) -> None:
    for tenant in ("acme", "shop"):  # tenants that exist: the command line refuses others
        assert cli_outcome(env, "tenants", "create", tenant)[0] == 0
    code, output = cli_outcome(env, "reset", "request", "--tenant", "acme", "--user-id", "u1",
                               "--email", "ada@example.test")
    assert code == 0, output
    assert cli_outcome(env, "worker", "--once")[0] == 0
    [message] = delivered(env)
    token = token_of(message)

    for command in ("verify", "consume"):
        for tenant in ([], ["--tenant", "shop"]):
            assert cli_outcome(env, "reset", command, *tenant, token) == (4, "Error: The reset link is not valid.\n")
    code, output = cli_outcome(env, "reset", "verify", "--tenant", "acme", token, "--json")
    assert code == 0 and json.loads(output)["user_id"] == "u1", "the tenant's own id, not the scoped one"
    code, output = cli_outcome(env, "reset", "consume", "--tenant", "acme", token)
    assert code == 0 and " of user u1;" in output


def test_a_token_that_begins_with_a_dash_is_read_as_the_token_not_as_an_option(env: Env) -> None:
    # Base64url: one token in 64 begins with "-". Unknown, it is refused as a link, not as a usage error.
    dashed = "-" + "A" * 42
    for command in ("verify", "consume"):
        assert cli_outcome(env, "reset", command, dashed) == (4, "Error: The reset link is not valid.\n")
        assert cli_outcome(env, "reset", command, "--json", dashed)[0] == 4
    code, output = cli_outcome(env, "reset", "verify", "--jsn", dashed)
    assert code == 2 and "--jsn" in output and dashed not in output, "a mistyped option is still refused"


def test_the_second_request_within_the_cooldown_is_reused(env: Env) -> None:
    first = json.loads(cli_outcome(env, "reset", "request", "--user-id", "1", "--email", "a@example.test", "--json")[1])
    again = json.loads(cli_outcome(env, "reset", "request", "--user-id", "1", "--email", "a@example.test", "--json")[1])
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
    env: Env, engine: Engine, args: list[str], message: str
) -> None:
    code, output = cli_outcome(env, *args)
    assert code != 0
    assert message in output
    assert "Traceback" not in output
    code, output = cli_outcome(env, "outbox", "status", "--json")
    assert sum(json.loads(output)["by_state"].values()) == 0


def test_a_worker_stops_cleanly_on_sigterm_and_logs_every_delivery(env: Env, engine: Engine) -> None:
    answer = json.loads(cli_outcome(env, "reset", "request", "--user-id", "9", "--email", "z@example.test",
                                    "--json")[1])
    worker = subprocess.Popen(
        [AUTHLEDGER, "worker", "--inflight", "2"], env=process_env(env),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    wait_until(lambda: email_event_types(engine, answer["message_id"])[-1] == "ProviderAccepted",
               what="the worker to record the delivery")
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


def test_a_lease_that_cannot_outlast_the_provider_timeout_is_refused_at_start(env: Env) -> None:
    code, output = cli_outcome({**env, "AUTHLEDGER_LEASE_SECONDS": "10", "AUTHLEDGER_PROVIDER_TIMEOUT": "10"},
                               "worker", "--once")
    assert code == 78
    assert "AUTHLEDGER_LEASE_SECONDS (10) must exceed AUTHLEDGER_PROVIDER_TIMEOUT" in output



def test_the_pool_grows_with_the_delivery_threads(env: Env) -> None:
    """Each delivery thread holds a connection across its send; 24 threads must not queue for 10."""
    app = App.from_environment(env)
    app.reserve_connections(24)
    try:
        assert app.engine.pool.size() >= 26
    finally:
        app.close()


def test_a_worker_without_a_master_key_refuses_to_start(env: Env) -> None:
    code, output = cli_outcome({**env, "AUTHLEDGER_MASTER_KEY": ""}, "worker", "--once")
    assert code == 78
    assert "AUTHLEDGER_MASTER_KEY is required" in output
