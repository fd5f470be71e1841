"""The case page's support forms in a real browser (chromium, against `authledger serve`): they post, and the
case page then shows what support did.

The browser is tests/support/browser.py's; without the system's chromium
and chromedriver these tests skip and say why. Screenshots land in
test-artifacts/console/.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from domain.reset import RequestReset
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.console.support import key_of
from tests.support.browser import accessibility_problems, navigates, needs_browser, problems_in_console, shows
from tests.support.browser import shot as save_shot
from tests.support.cli import Env
from tests.support.servers import start_serve

pytestmark = needs_browser
pytest.importorskip("selenium", reason="selenium is not installed (pip install -e .[test])")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402

REASON = "ticket 4711: the user reports a link they did not ask for"


@pytest.fixture
def base_url(env: Env, tmp_path: Path, ctx: ServiceContext) -> Iterator[str]:
    request_reset(ctx, RequestReset("42", "ada@example.test"))
    env = {**env, "AUTHLEDGER_DATA_DIR": str(tmp_path / "data"), "AUTHLEDGER_POLL_SECONDS": "1"}
    process, base = start_serve(env, tmp_path, "--inflight", "0")
    try:
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


def event_types(engine: Engine) -> list[str]:
    with engine.connect() as connection:
        return list(connection.execute(text("SELECT event_type FROM events ORDER BY global_position")).scalars())


def test_an_admin_is_refused_a_blank_reason_then_invalidates_and_sends_a_fresh_code_from_the_case_page(
    browser: Any, base_url: str, ctx: ServiceContext, engine: Engine
) -> None:
    browser.get(f"{base_url}/console/sign-in")
    browser.find_element(By.ID, "api_key").send_keys(key_of(ctx, "helpdesk", "review", "admin"), Keys.ENTER)
    assert shows(browser, "Search")
    browser.get(f"{base_url}/console/case?kind=user&id=42")
    assert shows(browser, "User 42")
    assert accessibility_problems(browser) == []
    save_shot(browser, "console", "case-support-forms")
    before = event_types(engine)
    # A blank reason gets past the browser's `required` check: the server is the one that refuses it.
    browser.find_element(By.ID, "invalidate-reason").send_keys("   ")
    with navigates(browser):
        browser.find_element(By.XPATH, "//button[text()='Invalidate open links and codes']").click()
    assert shows(browser, "User 42")
    assert browser.find_element(By.CSS_SELECTOR, "[role=alert]").text.startswith(
        "Not invalidated: a support action needs a reason")
    assert event_types(engine) == before

    browser.find_element(By.ID, "invalidate-reason").send_keys(REASON)
    with navigates(browser):
        browser.find_element(By.XPATH, "//button[text()='Invalidate open links and codes']").click()

    assert shows(browser, "User 42")
    assert browser.find_element(By.CSS_SELECTOR, "[role=status]").text.startswith("Invalidated: the user's open links")
    told = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "li.sentence")]
    assert any("was invalidated by support (client:helpdesk)" in s and f"because {REASON}" in s for s in told)
    assert "ResetInvalidated" in [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "table.events td")]
    save_shot(browser, "console", "case-invalidated")

    Select(browser.find_element(By.ID, "resend-flow")).select_by_value("otp")
    browser.find_element(By.ID, "resend-reason").send_keys(REASON)
    with navigates(browser):
        browser.find_element(By.XPATH, "//button[text()='Send a fresh link/code']").click()

    assert shows(browser, "User 42")
    assert browser.find_element(By.CSS_SELECTOR, "[role=status]").text.startswith("Sent: a fresh link or code")
    told = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "li.sentence")]
    assert any(f"Support sent it on the user's behalf because {REASON}." in s for s in told)
    assert event_types(engine)[-2:] == ["OtpChallengeIssued", "EmailQueued"]
    save_shot(browser, "console", "case-resent")
    [refusal] = problems_in_console(browser)  # the blank reason's 400, and nothing else
    assert refusal.endswith("/console/case/invalidate - Failed to load resource: the server responded with a "
                            "status of 400 (Bad Request)")
