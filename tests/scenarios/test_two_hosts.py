"""Two `serve` hosts on one database: the once-only roles run on one, and move when it dies.

Each "host" is an `authledger serve` process with its own data folder, port
and host name, on the test's database. The catch-up runner and the counts
writer run where the role's advisory lock is held (infra/db/leadership.py);
killing that process with SIGKILL must hand both roles to the other, and the
projections must still equal a replay of the log: nothing folded twice.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine

from infra.db.leadership import holders
from tests.support.cli import Env, cli_outcome, cli_streams
from tests.support.servers import start_serve
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


def roles_now(engine: Engine) -> dict[str, str | None]:
    with engine.connect() as connection:
        return holders(connection)


def host(env: Env, tmp_path: Path, name: str) -> tuple[subprocess.Popen[bytes], str]:
    folder = tmp_path / name
    folder.mkdir()
    own = {**env, "AUTHLEDGER_HOST_NAME": name, "AUTHLEDGER_DATA_DIR": str(folder / "data"),
           "AUTHLEDGER_MAILDIR": str(folder / "maildir")}
    return start_serve(own, folder, "--processes", "1")


def caught_up(env: Env) -> bool | None:
    code, out, _ = cli_streams(env, "projections", "status", "--json")
    assert code == 0, out
    return all(p["lag_events"] == 0 for p in json.loads(out)["projections"]) or None


def some_requests(env: Env, first: int, count: int) -> None:
    for n in range(first, first + count):
        code, out = cli_outcome(env, "reset", "request", "--user-id", f"user-{n}", "--email", f"user{n}@example.test")
        assert code == 0, out


def test_the_other_host_takes_the_roles_when_their_holder_is_killed_and_nothing_is_folded_twice(
    env: Env, tmp_path: Path, engine: Engine
) -> None:
    first, _ = host(env, tmp_path, "host-a")
    second = None
    try:
        wait_until(lambda: roles_now(engine) == {"catch-up": "host-a", "closed-counts": "host-a"} or None,
                   what="host-a to take both roles")
        second, second_url = host(env, tmp_path, "host-b")
        some_requests(env, 0, 5)
        wait_until(lambda: caught_up(env), what="host-a's runner to fold the first requests")
        assert roles_now(engine) == {"catch-up": "host-a", "closed-counts": "host-a"}, "host-b waits its turn"

        first.send_signal(signal.SIGKILL)
        first.wait()
        wait_until(lambda: roles_now(engine) == {"catch-up": "host-b", "closed-counts": "host-b"} or None,
                   what="host-b to take both roles")
        some_requests(env, 5, 5)
        wait_until(lambda: caught_up(env), what="host-b's runner to fold the later requests")

        code, out = cli_outcome(env, "projections", "verify")
        assert code == 0, out
        code, out = cli_outcome(env, "clients", "create", "prometheus", "--scope", "operator", "--json")
        assert code == 0, out
        operator = {"Authorization": f"Bearer {json.loads(out)['api_key']}"}
        told = httpx.get(f"{second_url}/readyz", headers=operator).json()
        assert told["roles"] == {"catch-up": "host-b", "closed-counts": "host-b"}
        scraped = httpx.get(f"{second_url}/metrics", headers=operator).text
        assert 'authledger_role_held{role="catch-up",holder="host-b"} 1' in scraped.splitlines()
        assert httpx.get(f"{second_url}/readyz").json() == {"status": "ready"}, "hosts are an operator's to see"
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(30)
