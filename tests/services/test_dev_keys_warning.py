"""The development-keys warning comes where it matters: when a key is made, and when serve or worker starts."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

import infra.keys
from infra.config.settings import Settings
from infra.keys import load_master_keys, load_token_keys, warn_if_development_keys
from tests.support.cli import Env, process_env
from tests.support.servers import AUTHLEDGER

WARNING = "using generated development keys; set AUTHLEDGER_TOKEN_KEYS and AUTHLEDGER_MASTER_KEY in production"


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]


def test_making_the_keys_warns_once_and_a_later_process_reading_them_says_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(data_dir=tmp_path)
    with caplog.at_level(logging.WARNING, logger="authledger"):
        load_token_keys(settings)
        load_master_keys(settings)
        assert warnings_of(caplog) == [WARNING]

        caplog.clear()
        monkeypatch.setattr(infra.keys, "_warned", set())  # as in the next command's process
        load_token_keys(settings)
        load_master_keys(settings)
        assert warnings_of(caplog) == []

        warn_if_development_keys(settings)  # what serve and worker do on every start
        warn_if_development_keys(settings)
        assert warnings_of(caplog) == [WARNING]


def test_configured_keys_or_a_database_url_never_warn(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="authledger"):
        warn_if_development_keys(Settings(data_dir=tmp_path, database_url="postgresql://db.example/authledger"))
        warn_if_development_keys(Settings(data_dir=tmp_path, token_keys="k:" + "a" * 43, master_key="m:" + "b" * 44))
    assert warnings_of(caplog) == []


def stderr_of(env: Env, *args: str) -> str:
    """What ``authledger args...`` printed on stderr, in a process of its own (the warning is once per process)."""
    done = subprocess.run([AUTHLEDGER, *args], env=process_env(env), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stderr


@pytest.mark.slow
def test_on_the_embedded_default_only_the_first_command_and_the_worker_warn(embedded_data_dir: Path) -> None:
    env = {"DATABASE_URL": None, "AUTHLEDGER_TOKEN_KEYS": None, "AUTHLEDGER_MASTER_KEY": None,
           "AUTHLEDGER_DATA_DIR": str(embedded_data_dir), "AUTHLEDGER_LOG_FORMAT": "text"}

    assert WARNING not in stderr_of(env, "db", "init")
    request = ("reset", "request", "--user-id", "1", "--email", "ada@example.test")
    assert stderr_of(env, *request).count(WARNING) == 1, "the keys were made"
    assert WARNING not in stderr_of(env, *request), "the same keys, read again"
    assert stderr_of(env, "worker", "--once").count(WARNING) == 1, "a worker says it on every start"
