"""`worker --once` tells a script, by its exit status, when it gave up on an email."""

from __future__ import annotations

import json

from tests.support.cli import Env, cli_streams
from tests.support.http_provider import FakeHttpProvider


def test_worker_once_exits_13_after_the_tally_when_the_provider_refused_an_email_for_good(env: Env) -> None:
    with FakeHttpProvider() as provider:
        env = {**env, "AUTHLEDGER_PROVIDER": "http", "AUTHLEDGER_HTTP_PROVIDER_URL": provider.url}
        for user in ("1", "2"):
            assert cli_streams(env, "reset", "request", "--user-id", user, "--email", f"u{user}@example.test")[0] == 0
        provider.fail_next(1, status=422)  # refused for good: this one email, not the provider

        code, out, err = cli_streams(env, "worker", "--once", "--json")

    assert code == 13, err
    assert json.loads(out) == {"failed": 1, "sent": 1}, "the tally first, as on success"
    assert err.splitlines()[-1] == ("Error: gave up on 1 email(s) (failed: 1); `authledger outbox status` shows "
                                    "them, `authledger outbox retry` sends them again")


def test_worker_once_exits_0_when_every_email_was_sent_or_nothing_was_due(env: Env) -> None:
    assert cli_streams(env, "worker", "--once")[:2] == (0, "nothing due\n")
    assert cli_streams(env, "reset", "request", "--user-id", "1", "--email", "u1@example.test")[0] == 0
    assert cli_streams(env, "worker", "--once")[:2] == (0, "sent: 1\n")
