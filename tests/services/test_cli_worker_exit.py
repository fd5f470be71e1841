"""`worker --once` tells a script, by its exit status, when it gave up on an email."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli import cli
from tests.support.http_provider import FakeHttpProvider

KEYS = "k1:" + base64.urlsafe_b64encode(b"w" * 32).decode().rstrip("=")


@pytest.fixture
def env(database_url: str, tmp_path: Path) -> dict[str, str]:
    return {"DATABASE_URL": database_url, "AUTHLEDGER_TOKEN_KEYS": KEYS, "AUTHLEDGER_MAILDIR": str(tmp_path / "mail"),
            "AUTHLEDGER_RESET_URL": "https://app.test/reset", "AUTHLEDGER_LOG_FORMAT": "json"}


def run(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def test_worker_once_exits_13_after_the_tally_when_the_provider_refused_an_email_for_good(
    env: dict[str, str]
) -> None:
    with FakeHttpProvider() as provider:
        env = {**env, "AUTHLEDGER_PROVIDER": "http", "AUTHLEDGER_HTTP_PROVIDER_URL": provider.url}
        for user in ("1", "2"):
            assert run(env, "reset", "request", "--user-id", user, "--email", f"u{user}@example.test")[0] == 0
        provider.fail_next(1, status=422)  # refused for good: this one email, not the provider

        code, out, err = run(env, "worker", "--once", "--json")

    assert code == 13, err
    assert json.loads(out) == {"failed": 1, "sent": 1}, "the tally first, as on success"
    assert err.splitlines()[-1] == ("Error: gave up on 1 email(s) (failed: 1); `authledger outbox status` shows "
                                    "them, `authledger outbox retry` sends them again")


def test_worker_once_exits_0_when_every_email_was_sent_or_nothing_was_due(env: dict[str, str]) -> None:
    assert run(env, "worker", "--once")[:2] == (0, "nothing due\n")
    assert run(env, "reset", "request", "--user-id", "1", "--email", "u1@example.test")[0] == 0
    assert run(env, "worker", "--once")[:2] == (0, "sent: 1\n")
