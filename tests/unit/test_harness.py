"""The test harness's own promises: one wait that says what it waited for, one environment rule, one set of keys."""

from __future__ import annotations

import base64
import os

import pytest

from infra.config.values import parse_master_keys, parse_token_keys
from tests.support.cli import cli_env, process_env, run_cli
from tests.support.keys import (
    NEW_MASTER_KEY, SIGNING_KEY, TEST_KEYS, TEST_MASTER_KEY, TEST_SIGNING_KEY, TOKEN_KEYS_SETTING, WRONG_MASTER_KEY,
)
from tests.support.waiting import wait_until


def test_wait_until_answers_the_conditions_first_truthy_answer() -> None:
    answers = iter([None, 0, [], ["it"]])

    assert wait_until(lambda: next(answers), what="a list") == ["it"]


def test_wait_until_says_what_it_waited_for_when_it_gives_up() -> None:
    with pytest.raises(AssertionError, match="for the provider to answer, in vain"):
        wait_until(lambda: False, timeout=0, what="the provider to answer")


def test_wait_until_asks_for_the_state_only_when_it_gives_up() -> None:
    asked = []

    def state() -> str:
        asked.append(True)
        return "checkpoint 3 of 9"

    assert wait_until(lambda: True, what=state)
    assert asked == []
    with pytest.raises(AssertionError, match="checkpoint 3 of 9"):
        wait_until(lambda: False, timeout=0, what=state)


def test_a_subprocess_environment_is_the_tests_own_with_settings_applied_and_none_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://somewhere/else")
    monkeypatch.setenv("AUTHLEDGER_SHELL_ONLY", "kept")

    env = process_env(cli_env(None, AUTHLEDGER_LOG_FORMAT="json"))

    assert "DATABASE_URL" not in env
    assert env["AUTHLEDGER_SHELL_ONLY"] == "kept" and env["AUTHLEDGER_LOG_FORMAT"] == "json"
    assert env["AUTHLEDGER_TOKEN_KEYS"] == TOKEN_KEYS_SETTING
    assert env["PATH"] == os.environ["PATH"]


def test_the_cli_runner_unsets_what_the_env_says_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTHLEDGER_OTP_TTL", "not a number")

    assert run_cli({"AUTHLEDGER_OTP_TTL": None, "DATABASE_URL": None}, "config", "show", "--json").exit_code == 0
    assert run_cli({"DATABASE_URL": None}, "config", "show", "--json").exit_code == 78


def test_each_test_key_is_the_same_bytes_as_the_setting_an_operator_would_write() -> None:
    assert parse_token_keys(TOKEN_KEYS_SETTING) == TEST_KEYS.keys
    assert next(iter(parse_token_keys(TOKEN_KEYS_SETTING))) == TEST_KEYS.current_id, "newest first"
    assert parse_master_keys(TEST_MASTER_KEY) == {"test": b"m" * 32}
    assert parse_master_keys(NEW_MASTER_KEY).keys() == {"m2"}
    wrong = parse_master_keys(WRONG_MASTER_KEY)
    assert wrong.keys() == {"test"} and wrong["test"] != b"m" * 32, "the test key's id, other bytes"
    assert TEST_SIGNING_KEY.private_bytes_raw() == base64.b64decode(SIGNING_KEY)
