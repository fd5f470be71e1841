"""The console in a real browser, `serve` reading from a streaming standby: the case page says so.

The standby is tests/support/replication.py's (PostgreSQL's own replication);
the browser is tests/support/browser.py's, skipped where chromium is missing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.bootstrap import App
from infra.services.clients import create_client
from tests.support.browser import accessibility_problems, needs_browser, problems_in_console, shows
from tests.support.browser import shot as save_shot
from tests.support.cli import Env, cli_env, cli_outcome, process_env
from tests.support.replication import replicated_pair
from tests.support.servers import start_serve

pytestmark = needs_browser
pytest.importorskip("selenium", reason="selenium is not installed (pip install -e .[test])")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402


@pytest.fixture
def replica_env(tmp_path: Path) -> Iterator[Env]:
    """authledger on a primary of its own, reading from a standby of it, with one reset request replayed there."""
    with replicated_pair(synchronous=False) as pair:
        env = cli_env(pair.node_url(pair.primary, "postgres"),
                      AUTHLEDGER_READ_DATABASE_URL=pair.node_url(pair.standby, "postgres"),
                      AUTHLEDGER_MAILDIR=str(tmp_path / "maildir"), AUTHLEDGER_RESET_URL="https://app.test/reset",
                      AUTHLEDGER_DATA_DIR=str(tmp_path / "data"))
        assert cli_outcome(env, "db", "init")[0] == 0
        code, out = cli_outcome(env, "reset", "request", "--user-id", "42", "--email", "ada@example.test")
        assert code == 0, out
        pair.wait_for_replay(what="the standby to replay the request")
        yield env


@pytest.fixture
def review_key(replica_env: Env) -> str:
    app = App.from_environment(process_env(replica_env))
    try:
        return create_client(app.services, "support", scopes=("review",)).api_key  # checked on the primary
    finally:
        app.close()


@pytest.fixture
def base_url(replica_env: Env, tmp_path: Path) -> Iterator[str]:
    process, base = start_serve(replica_env, tmp_path, "--inflight", "0")
    try:
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_case_read_from_the_replica_says_how_far_behind_the_primary_it_was(
    browser: Any, base_url: str, review_key: str
) -> None:
    browser.get(f"{base_url}/console/sign-in")
    browser.find_element(By.ID, "api_key").send_keys(review_key, Keys.ENTER)
    assert shows(browser, "Search")
    browser.find_element(By.ID, "q").send_keys("42", Keys.ENTER)

    assert shows(browser, "User 42")
    [note] = browser.find_elements(By.CSS_SELECTOR, "p.replica")
    # The sign-in itself wrote to the primary: the standby may be replaying it as the page is read.
    assert re.fullmatch(r"This case was read from a replica (\d+(\.\d)? s|under 0\.1 s) behind the primary\.",
                        note.text), note.text
    assert accessibility_problems(browser) == []
    save_shot(browser, "console", "case-from-replica")
    assert problems_in_console(browser) == []
