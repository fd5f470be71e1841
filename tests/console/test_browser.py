"""The console in a real browser: Debian's chromium, driven by chromedriver, against `authledger serve`.

The browser is tests/support/browser.py's (the one harness): nothing is
downloaded, and without the system's chromium and chromedriver these tests
skip and say why. Screenshots of each page land in test-artifacts/console/.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from attrs import evolve
from sqlalchemy import Engine

from domain.errors import TokenInvalid
from infra.clock import ManualClock
from infra.services.reset import verify_token
from infra.services.unit_of_work import ServiceContext
from tests.console.support import key_of
from tests.support.browser import accessibility_problems, navigates, needs_browser, problems_in_console, shows
from tests.support.browser import shot as save_shot
from tests.support.cli import Env, process_env
from tests.support.incidents import START, WEB, duplicate_emails
from tests.support.secrets import reset_token_of
from tests.support.servers import AUTHLEDGER, start_serve

pytestmark = needs_browser
pytest.importorskip("selenium", reason="selenium is not installed (pip install -e .[test])")
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402


@pytest.fixture
def case(ctx: ServiceContext, engine: Engine) -> dict[str, UUID]:
    """A superseded link, a worker killed mid-lease whose message a second worker then sent, and the
    superseded link presented again (at 10:05, to ``verify``): refused, and the refusal recorded."""
    found = duplicate_emails(ctx, engine)
    old_link = reset_token_of(engine, ctx.keys, found["first_request"])
    with pytest.raises(TokenInvalid):
        verify_token(evolve(ctx, clock=ManualClock(START + timedelta(minutes=5))), old_link, WEB)
    return found


@pytest.fixture
def review_key(ctx: ServiceContext) -> str:
    return key_of(ctx, "support", "review")


@pytest.fixture
def base_url(env: Env, tmp_path: Path, case: dict[str, UUID]) -> Iterator[str]:
    env = {**env, "AUTHLEDGER_DATA_DIR": str(tmp_path / "data"), "AUTHLEDGER_POLL_SECONDS": "1"}
    process, base = start_serve(env, tmp_path, "--inflight", "0")
    try:
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


def shot(browser: Any, name: str) -> None:
    save_shot(browser, "console", name)


def search_for(browser: Any, query: str) -> None:
    field = browser.find_element(By.ID, "q")
    field.clear()
    with navigates(browser):
        field.send_keys(query, Keys.ENTER)


def test_a_reviewer_signs_in_searches_reads_a_case_and_signs_out_with_the_keyboard(
    browser: Any, base_url: str, review_key: str, case: dict[str, UUID], database_url: str
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
    assert addresses(browser) <= {"ada@example.test", ""} and "ada@example.test" in addresses(browser)
    assert browser.find_elements(By.CSS_SELECTOR, "form.erase") == [], "a review key is offered no erase form"
    assert accessibility_problems(browser) == []
    shot(browser, "case-user")

    search_for_from_nav(browser, str(case["first_request"]))
    assert shows(browser, f"Request {case['first_request']}")
    assert sentences(browser) == explained(database_url, "--request-id", case["first_request"])
    assert any("superseded" in sentence for sentence in sentences(browser))
    [link] = browser.find_elements(By.CSS_SELECTOR, "svg.timeline [data-kind=supersession]")
    assert (link.get_attribute("data-request"), link.get_attribute("data-superseded-by")) == (
        str(case["first_request"]), str(case["second_request"]))
    [rejected] = browser.find_elements(By.CSS_SELECTOR, "svg.timeline [data-kind=verification]")
    assert (rejected.get_attribute("data-request"), rejected.get_attribute("data-outcome"),
            rejected.get_attribute("data-reason")) == (str(case["first_request"]), "rejected", "superseded")
    assert "ResetTokenRejected" in [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "table.events td")]
    assert addresses(browser) <= {"ada@example.test", ""} and "ada@example.test" in addresses(browser)
    assert "enc:v1:" not in browser.page_source
    shot(browser, "case-request")

    search_for_from_nav(browser, str(case["second_message"]))
    assert shows(browser, f"Message {case['second_message']}")
    message = str(case["second_message"])
    assert shapes(browser, "lease") == [(message, "w1", "1", "expired"), (message, "w2", "2", "accepted")]
    assert shapes(browser, "attempt") == [(message, "w2", "2", "accepted")]
    assert sentences(browser) == explained(database_url, "--message-id", case["second_message"])
    shot(browser, "case-message")
    assert accessibility_problems(browser) == []

    browser.find_element(By.XPATH, "//button[text()='Sign out']").click()
    assert shows(browser, "Sign in")
    assert browser.find_element(By.CLASS_NAME, "notice").text == "You are signed out."
    browser.get(f"{base_url}/console/")
    assert shows(browser, "Sign in"), "the session is gone"
    shot(browser, "signed-out")

    assert problems_in_console(browser) == []


def explained(database_url: str, option: str, value: UUID) -> list[str]:
    """The sentences as `authledger explain` prints them: the indented lines under "What happened to"."""
    printed = subprocess.run([AUTHLEDGER, "explain", option, str(value)], check=True, capture_output=True,
                             text=True, env=process_env({"DATABASE_URL": database_url})).stdout
    told = printed.split("\n\n")[0].splitlines()
    assert told[0].startswith("What happened to ")
    return [line.removeprefix("  ") for line in told[1:]]


def sentences(browser: Any) -> list[str]:
    return [li.text for li in browser.find_elements(By.CSS_SELECTOR, "li.sentence")]


def addresses(browser: Any) -> set[str]:
    """The event list's address column."""
    return {cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "table.events tbody td.address")}


def shapes(browser: Any, kind: str) -> list[tuple[str | None, ...]]:
    """The timeline's shapes of one kind, as (message, worker, attempt, outcome)."""
    return [tuple(shape.get_attribute(f"data-{name}") for name in ("message", "worker", "attempt", "outcome"))
            for shape in browser.find_elements(By.CSS_SELECTOR, f"svg.timeline [data-kind={kind}]")]


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
