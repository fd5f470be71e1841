"""Hostile input on the command line: clear errors, no tracebacks, no partial writes, nothing echoed raw."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text

from tests.support.cli import Env, run_cli

EXPECTED_EXIT_CODES = {0, 2, 4, 5, 6}

nasty_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=300),
    st.sampled_from([
        "'; DROP TABLE events; --", "\x00", "a@b.c\r\nBcc: evil@example.test", "\u202e@evil.test",
        "<script>alert(1)</script>@x.test", "x" * 5000, "${jndi:ldap://x}", "../../etc/passwd", "\x1b[31mred",
    ]),
)


def event_count(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(text("SELECT count(*) FROM events")).scalar_one()


def assert_clean_output(output: str) -> None:
    assert "Traceback" not in output
    assert not any(ord(c) < 32 and c not in "\n\t" for c in output), "control characters echoed back"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user_id=nasty_text, email=nasty_text, key=st.one_of(st.none(), nasty_text))
def test_reset_request_rejects_or_accepts_cleanly(
    env: Env, engine: Engine, user_id: str, email: str, key: str | None
) -> None:
    args = ["reset", "request", "--user-id", user_id, "--email", email]
    if key is not None:
        args += ["--idempotency-key", key]
    before = event_count(engine)
    result = run_cli(env, *args)
    assert result.exit_code in EXPECTED_EXIT_CODES, result.output
    assert_clean_output(result.output)
    if result.exit_code != 0:
        assert event_count(engine) == before, "a refused request wrote nothing"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(token=nasty_text)
@pytest.mark.parametrize("command", ["verify", "consume"])
def test_token_commands_refuse_garbage_cleanly(env: Env, engine: Engine, command: str, token: str) -> None:
    before = event_count(engine)
    result = run_cli(env, "reset", command, "--", token)
    assert result.exit_code in {2, 4}, result.output
    assert_clean_output(result.output)
    assert event_count(engine) == before


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user_id=nasty_text, email=nasty_text, purpose=nasty_text)
def test_otp_request_rejects_or_accepts_cleanly(
    env: Env, engine: Engine, user_id: str, email: str, purpose: str
) -> None:
    before = event_count(engine)
    result = run_cli(env, "otp", "request", "--user-id", user_id, "--email", email, "--purpose", purpose)
    assert result.exit_code in EXPECTED_EXIT_CODES, result.output
    assert_clean_output(result.output)
    if result.exit_code != 0:
        assert event_count(engine) == before, "a refused request wrote nothing"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(challenge_id=nasty_text, code=nasty_text)
def test_otp_verify_refuses_garbage_cleanly(env: Env, engine: Engine, challenge_id: str, code: str) -> None:
    before = event_count(engine)
    result = run_cli(env, "otp", "verify", "--user-id", "42", "--", challenge_id, code)
    assert result.exit_code in {2, 4}, result.output
    assert_clean_output(result.output)
    assert event_count(engine) == before
