"""The OTP flow and idempotency keys through the `authledger` command."""

from __future__ import annotations

import json
import mailbox
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, text

from tests.support.cli import Env, cli_outcome, run_cli
from tests.support.keys import TEST_KEYS
from tests.support.secrets import otp_code_of

def event_count(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(text("SELECT count(*) FROM events")).scalar_one()


def code_of(engine: Engine, challenge_id: str) -> str:
    """The code the challenge's email carries: derived from the key and the nonce the log holds for it."""
    return otp_code_of(engine, TEST_KEYS, challenge_id)


def wrong(code: str) -> str:
    return str((int(code) + 1) % 10**6).zfill(6)


def request(env: Env, *extra: str) -> dict[str, object]:
    code, output = cli_outcome(env, "otp", "request", "--user-id", "42", "--email", "ada@example.test", *extra,
                               "--json")
    assert code == 0, output
    return json.loads(output)


def test_request_deliver_and_verify_a_code_from_the_command_line(env: Env, engine: Engine) -> None:
    answer = request(env, "--purpose", "login")
    assert set(answer) >= {"challenge_id", "message_id", "expires_at", "reused"} and answer["reused"] is False

    code, output = cli_outcome(env, "worker", "--once", "--json")
    assert code == 0 and json.loads(output) == {"sent": 1}
    [message] = mailbox.Maildir(env["AUTHLEDGER_MAILDIR"], create=False)
    text_part = next(part for part in message.walk() if part.get_content_type() == "text/plain")
    body = text_part.get_payload(decode=True).decode()
    sent_code = next(line for line in body.splitlines() if line.strip().isdigit()).strip()
    assert sent_code == code_of(engine, str(answer["challenge_id"]))

    code, output = cli_outcome(env, "otp", "verify", "--user-id", "42", str(answer["challenge_id"]), sent_code,
                               "--json")
    assert code == 0, output
    assert json.loads(output) == {"verified": True, "challenge_id": answer["challenge_id"], "attempts_left": 5}
    code, output = cli_outcome(env, "otp", "verify", "--user-id", "42", str(answer["challenge_id"]), sent_code)
    assert code == 4 and "already used" in output and sent_code not in output


def test_a_repeat_with_the_same_key_returns_the_same_challenge(env: Env) -> None:
    first = request(env, "--idempotency-key", "k-1")
    again = request(env, "--idempotency-key", "k-1")
    assert {k: again[k] for k in ("challenge_id", "message_id", "expires_at")} == {
        k: first[k] for k in ("challenge_id", "message_id", "expires_at")
    }
    assert again == first, "a replay answers exactly as the first call did"


def test_a_wrong_code_exits_non_zero_and_says_how_many_attempts_are_left(env: Env, engine: Engine) -> None:
    challenge_id = str(request(env)["challenge_id"])
    bad = wrong(code_of(engine, challenge_id))

    code, output = cli_outcome(env, "otp", "verify", "--user-id", "42", challenge_id, bad)
    assert code == 4
    assert output == "Error: The code is wrong; 4 attempts left.\n"

    result = run_cli(env, "otp", "verify", "--user-id", "42", challenge_id, bad, "--json")
    assert result.exit_code == 4
    assert json.loads(result.stdout) == {
        "verified": False, "attempts_left": 3, "error": "The code is wrong; 3 attempts left.",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("challenge_id", "code", "said"),
    [
        ("not-a-uuid", "123456", "the challenge id must be a UUID"),
        ("123e4567-e89b-12d3-a456-426614174000", "12345", "the code must be 6 digits"),
        ("123e4567-e89b-12d3-a456-426614174000", "abcdef", "the code must be 6 digits"),
    ],
)
def test_a_malformed_challenge_id_or_code_is_a_one_line_error_and_writes_nothing(
    env: Env, engine: Engine, challenge_id: str, code: str, said: str
) -> None:
    request(env)
    before = event_count(engine)

    exit_code, output = cli_outcome(env, "otp", "verify", "--user-id", "42", challenge_id, code)

    assert exit_code == 2
    assert output.startswith("Error: ") and said in output and output.count("\n") == 1
    assert event_count(engine) == before


def test_an_otp_key_reused_with_another_address_is_a_clear_mismatch(env: Env, engine: Engine) -> None:
    request(env, "--idempotency-key", "k-1")
    before = event_count(engine)

    code, output = cli_outcome(env, "otp", "request", "--user-id", "42", "--email", "eve@example.test",
                               "--idempotency-key", "k-1")  # fmt: skip

    assert code == 5
    assert output == (
        "Error: idempotency key 'k-1' was already used for user 42 with a different email address or purpose; "
        "retry with the same parameters, or use a new key for a new request\n"
    )
    assert "ada@example.test" not in output
    assert event_count(engine) == before


def test_a_reset_key_reused_with_another_address_is_a_clear_mismatch(env: Env, engine: Engine) -> None:
    args = ["reset", "request", "--user-id", "42", "--idempotency-key", "r-1"]
    code, output = cli_outcome(env, *args, "--email", "ada@example.test")
    assert code == 0, output
    before = event_count(engine)

    code, output = cli_outcome(env, *args, "--email", "eve@example.test")

    assert code == 5
    assert "idempotency key 'r-1' was already used for user 42 with a different email address" in output
    assert output.count("\n") == 1
    assert event_count(engine) == before


def test_the_account_lock_follows_its_environment_settings(env: Env, engine: Engine) -> None:
    env = {**env, "AUTHLEDGER_OTP_ACCOUNT_LOCK_FAILURES": "3", "AUTHLEDGER_OTP_ACCOUNT_LOCK_SECONDS": "60"}
    challenge_id = str(request(env)["challenge_id"])
    bad = wrong(code_of(engine, challenge_id))

    said = [cli_outcome(env, "otp", "verify", "--user-id", "42", challenge_id, bad) for _ in range(2)]
    before = datetime.now(UTC)
    code, output = cli_outcome(env, "otp", "verify", "--user-id", "42", challenge_id, bad)
    after = datetime.now(UTC)

    assert said == [(4, f"Error: The code is wrong; {n} attempts left.\n") for n in (4, 3)]
    assert code == 4 and "one-time codes for this account are locked until " in output, output
    until = datetime.fromisoformat(output.rsplit("locked until ", 1)[1].strip().rstrip("."))
    assert before + timedelta(seconds=60) <= until <= after + timedelta(seconds=60)
    code, output = cli_outcome(env, "otp", "verify", "--user-id", "42", challenge_id, code_of(engine, challenge_id))
    assert code != 0 and "locked until" in output and code_of(engine, challenge_id) not in output


def test_a_tenants_code_is_verified_only_for_that_tenant_and_user(env: Env, engine: Engine) -> None:
    for tenant in ("acme", "shop"):  # tenants that exist: the command line refuses others
        assert cli_outcome(env, "tenants", "create", tenant)[0] == 0
    code, output = cli_outcome(env, "otp", "request", "--tenant", "acme", "--user-id", "u1", "--email",
                               "ada@example.test", "--purpose", "step_up", "--json")  # fmt: skip
    assert code == 0, output
    challenge_id = json.loads(output)["challenge_id"]
    before = event_count(engine)

    for others in (["--user-id", "u1"], ["--tenant", "shop", "--user-id", "u1"],
                   ["--tenant", "acme", "--user-id", "u2"],
                   ["--tenant", "acme", "--user-id", "u1", "--purpose", "login"]):
        exit_code, output = cli_outcome(env, "otp", "verify", *others, challenge_id, code_of(engine, challenge_id))
        assert (exit_code, output) == (4, "Error: The code is not valid.\n"), others
    assert event_count(engine) == before, "no attempt was counted"

    exit_code, output = cli_outcome(env, "otp", "verify", "--tenant", "acme", "--user-id", "u1", "--purpose", "step_up",
                                    challenge_id, code_of(engine, challenge_id), "--json")  # fmt: skip
    assert exit_code == 0 and json.loads(output)["attempts_left"] == 5, output
    exit_code, output = cli_outcome(env, "history", "--tenant", "acme", "--user-id", "u1")
    assert exit_code == 0 and output.startswith("What happened to user u1 of tenant acme")
    exit_code, output = cli_outcome(env, "history", "--user-id", "u1")
    assert exit_code != 0 and "no events about user 'u1'" in output


@pytest.mark.parametrize("command", [["otp", "request", "--email", "ada@example.test"], ["history"],
                                     ["reset", "request", "--email", "ada@example.test"]])
def test_a_tenant_name_out_of_shape_is_a_usage_error_and_writes_nothing(
    env: Env, engine: Engine, command: list[str]
) -> None:
    exit_code, output = cli_outcome(env, *command, "--user-id", "u1", "--tenant", "Not A Tenant")
    assert exit_code == 2 and "a tenant name is 1-63 characters" in output
    assert event_count(engine) == 0


def test_a_bad_client_ip_is_a_one_line_error_and_writes_nothing(env: Env, engine: Engine) -> None:
    exit_code, output = cli_outcome(env, "otp", "request", "--user-id", "42", "--email", "ada@example.test",
                                    "--client-ip", "192.0.2.44:443")

    assert exit_code == 2
    assert output.startswith("Error: ") and "client_ip must be one IPv4 or IPv6 address" in output
    assert "192.0.2.44" not in output and output.count("\n") == 1
    assert event_count(engine) == 0


def test_the_per_ip_limits_follow_the_client_ip_and_their_settings(env: Env) -> None:
    limited = {**env, "AUTHLEDGER_LIMIT_PER_IP": "2"}
    for n in range(2):
        exit_code, output = cli_outcome(limited, "reset", "request", "--user-id", f"u{n}", "--email",
                                        f"u{n}@example.test", "--client-ip", "198.51.100.66")
        assert exit_code == 0, output

    exit_code, output = cli_outcome(limited, "reset", "request", "--user-id", "u9", "--email", "u9@example.test",
                                    "--client-ip", "198.51.100.66")

    assert exit_code == 6, output  # RateLimited
    assert "too many emails requested from this client IP" in output and "198.51.100.66" not in output
    assert cli_outcome(limited, "reset", "request", "--user-id", "u9", "--email", "u9@example.test")[0] == 0
