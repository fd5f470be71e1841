"""The one way tests run the CLI in-process: click's CliRunner on the real command group.

``env`` holds settings on top of the test process's environment; ``None``
unsets one. The ``env`` fixture (tests/conftest.py) is the usual starting
point: this test's database, the test keys, JSON logs and a Maildir of its
own. Subprocesses take ``process_env(env)``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from click.testing import CliRunner, Result

from cli import cli
from tests.support.keys import TOKEN_KEYS_SETTING

Env = Mapping[str, str | None]


def cli_env(database_url: str | None, **settings: str | None) -> dict[str, str | None]:
    """This database, the test token keys, and ``settings`` on top (None unsets)."""
    return {"DATABASE_URL": database_url, "AUTHLEDGER_TOKEN_KEYS": TOKEN_KEYS_SETTING, **settings}


def run_cli(env: Env, *args: str, input: str | None = None) -> Result:
    """``authledger args...`` with ``env``, ``input`` on its stdin."""
    return CliRunner().invoke(cli, list(args), env=dict(env), input=input)


def cli_outcome(env: Env, *args: str, input: str | None = None) -> tuple[int, str]:
    """The exit code, and stdout on success or everything printed on failure (logs go to stderr)."""
    result = run_cli(env, *args, input=input)
    return result.exit_code, result.stdout if result.exit_code == 0 else result.output


def cli_streams(env: Env, *args: str, input: str | None = None) -> tuple[int, str, str]:
    """The exit code, stdout and stderr apart."""
    result = run_cli(env, *args, input=input)
    return result.exit_code, result.stdout, result.stderr


def process_env(env: Env) -> dict[str, str]:
    """``env`` for a subprocess: the test process's environment with ``env`` applied."""
    merged = {**os.environ, **env}
    return {name: value for name, value in merged.items() if value is not None}
