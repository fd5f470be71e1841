"""The console in a real browser: Debian's chromium, driven by chromedriver, against `authledger serve`.

The browser is tests/support/browser.py's (the one harness): nothing is
downloaded, and without the system's chromium and chromedriver these tests
skip and say why. Screenshots of each page land in test-artifacts/console/.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
from sqlalchemy import Engine

from infra.review.history import explain
from infra.services.clients import create_client
from infra.services.unit_of_work import ServiceContext
from tests.http.test_serve import AUTHLEDGER, KEYS, free_port, wait_for
from tests.support.browser import needs_browser, problems_in_console, shows
from tests.support.browser import shot as save_shot
from tests.support.incidents import duplicate_emails

pytestmark = needs_browser
pytest.importorskip("selenium", reason="selenium is not installed (pip install -e .[test])")
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402


@pytest.fixture
def case(ctx: ServiceContext, engine: Engine) -> dict[str, UUID]:
    """A superseded link, and a worker killed mid-lease whose message a second worker then sent."""
    return duplicate_emails(ctx, engine)


@pytest.fixture
def review_key(ctx: ServiceContext) -> str:
    return create_client(ctx, "support").api_key


@pytest.fixture
def base_url(database_url: str, tmp_path: Path, case: dict[str, UUID]) -> Iterator[str]:
    env = {**os.environ, "DATABASE_URL": database_url, "AUTHLEDGER_TOKEN_KEYS": KEYS,
           "AUTHLEDGER_DATA_DIR": str(tmp_path / "data"), "AUTHLEDGER_LOG_FORMAT": "json",
           "AUTHLEDGER_POLL_SECONDS": "1"}
    port = free_port()
    with (tmp_path / "serve.err").open("wb") as err:
        process = subprocess.Popen([AUTHLEDGER, "serve", "--port", str(port), "--inflight", "0"], env=env,
                                   stdout=subprocess.DEVNULL, stderr=err)
    base = f"http://127.0.0.1:{port}"

    def up() -> bool | None:
        assert process.poll() is None, (tmp_path / "serve.err").read_text()
        try:
            return httpx.get(f"{base}/healthz", timeout=1).status_code == 200 or None
        except httpx.TransportError:
            return None

    try:
        wait_for("the server to answer", up)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


def shot(browser: Any, name: str) -> None:
    save_shot(browser, "console", name)


def search_for(browser: Any, query: str) -> None:
    field = browser.find_element(By.ID, "q")
    field.clear()
    field.send_keys(query, Keys.ENTER)


def test_a_reviewer_signs_in_searches_reads_a_case_and_signs_out_with_the_keyboard(
    browser: Any, base_url: str, review_key: str, case: dict[str, UUID], engine: Engine
) -> None:
    browser.get(f"{base_url}/console/")
    assert shows(browser, "Sign in") and browser.current_url.endswith("/console/sign-in")
    label = browser.find_element(By.CSS_SELECTOR, "label[for=api_key]")
    assert label.text == "API key"
    shot(browser, "sign-in")

    for _ in range(10):  # the keyboard alone reaches the key field
        if browser.switch_to.active_element.get_attribute("id") == "api_key":
            break
        browser.switch_to.active_element.send_keys(Keys.TAB)
    assert browser.switch_to.active_element.get_attribute("id") == "api_key"
    browser.switch_to.active_element.send_keys(review_key, Keys.ENTER)

    assert shows(browser, "Search")
    assert browser.find_element(By.CSS_SELECTOR, "label[for=q]").text == (
        "User id, request id, message id or email address")
    assert [a.text for a in browser.find_elements(By.CSS_SELECTOR, "nav a")] == ["Search", "Outbox", "Audit"]
    shot(browser, "search")

    search_for(browser, "no-such-user")
    WebDriverWait(browser, 10, ignored_exceptions=[StaleElementReferenceException]).until(
        lambda driver: driver.find_element(By.CLASS_NAME, "nothing").text == "Nothing found.")

    search_for(browser, "42")
    assert shows(browser, "User 42")
    shot(browser, "case-user")

    search_for_from_nav(browser, str(case["first_request"]))
    assert shows(browser, f"Request {case['first_request']}")
    told = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "li.sentence")]
    review = explain(engine, request_id=case["first_request"], now=datetime.now(UTC))
    assert told == [finding.sentence for finding in review.findings]
    [link] = browser.find_elements(By.CSS_SELECTOR, "svg.timeline [data-kind=supersession]")
    assert (link.get_attribute("data-request"), link.get_attribute("data-superseded-by")) == (
        str(case["first_request"]), str(case["second_request"]))
    shot(browser, "case-request")

    search_for_from_nav(browser, str(case["second_message"]))
    assert shows(browser, f"Message {case['second_message']}")
    bars = [(bar.get_attribute("data-message"), bar.get_attribute("data-worker"), bar.get_attribute("data-attempt"),
             bar.get_attribute("data-outcome"))
            for bar in browser.find_elements(By.CSS_SELECTOR, "svg.timeline rect[data-kind=lease]")]
    message = str(case["second_message"])
    assert bars == [(message, "w1", "1", "expired"), (message, "w2", "2", "accepted")]
    told = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "li.sentence")]
    review = explain(engine, message_id=case["second_message"], now=datetime.now(UTC))
    assert told == [finding.sentence for finding in review.findings]
    shot(browser, "case-message")

    browser.find_element(By.XPATH, "//button[text()='Sign out']").click()
    assert shows(browser, "Sign in")
    assert browser.find_element(By.CLASS_NAME, "notice").text == "You are signed out."
    browser.get(f"{base_url}/console/")
    assert shows(browser, "Sign in"), "the session is gone"
    shot(browser, "signed-out")

    assert problems_in_console(browser) == []


def search_for_from_nav(browser: Any, query: str) -> None:
    browser.find_element(By.LINK_TEXT, "Search").click()
    assert shows(browser, "Search")
    search_for(browser, query)


def test_a_refused_key_is_told_why_and_the_page_raises_no_console_error(
    browser: Any, base_url: str
) -> None:
    browser.get(f"{base_url}/console/sign-in")
    browser.find_element(By.ID, "api_key").send_keys("alk_not_a_key", Keys.ENTER)

    WebDriverWait(browser, 10).until(lambda driver: driver.find_elements(By.CSS_SELECTOR, "[role=alert]"))
    assert browser.find_element(By.CSS_SELECTOR, "[role=alert]").text == "That API key is unknown or revoked."
    shot(browser, "sign-in-refused")
    [refusal] = problems_in_console(browser)  # the page's own 401, and nothing else
    assert refusal.endswith("/console/sign-in - Failed to load resource: the server responded with a status of 401 "
                            "(Unauthorized)")
