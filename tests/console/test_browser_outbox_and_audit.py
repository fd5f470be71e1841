"""The outbox and audit pages, and address search, in a real browser (tests/support/browser.py's chromium).

The app runs in-process under uvicorn with a console whose ``authenticate``
gives named clients other scopes (as tests/console/support.with_callers
does, until keys carry scopes), so an admin session and a review session
can be driven side by side. Screenshots land in test-artifacts/console/.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from attrs import evolve
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import Engine, text

from domain.clients import Caller
from domain.reset import RequestReset
from infra.audit.seal import seal
from infra.console.app import Console
from infra.http.app import create_app
from infra.services.clients import authenticate, create_client
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.console.test_outbox_and_audit_pages import abandoned_message
from tests.support.browser import needs_browser, problems_in_console, served, shows
from tests.support.browser import shot as save_shot
from tests.support.replay import assert_projections_match_log

pytestmark = needs_browser
pytest.importorskip("selenium", reason="selenium is not installed (pip install -e .[test])")
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402

REVIEW, ADMIN = frozenset({"review"}), frozenset({"review", "admin"})
SIGNING_KEY = Ed25519PrivateKey.generate()


def shot(browser: Any, name: str) -> None:
    save_shot(browser, "console", name)


@pytest.fixture
def scopes() -> dict[str, frozenset[str]]:
    """What each named client's key may do; a test may change it while a page is open."""
    return {"support": REVIEW, "operator": ADMIN}


@pytest.fixture
def base_url(ctx: ServiceContext, scopes: dict[str, frozenset[str]]) -> Iterator[str]:
    def scoped(engine: Engine, api_key: str) -> Caller | None:
        caller = authenticate(engine, api_key)
        return evolve(caller, scopes=scopes[caller.client]) if caller and caller.client in scopes else caller

    console = Console(ctx, idle=timedelta(minutes=15), authenticate=scoped, signing_key=lambda: SIGNING_KEY)
    with served(create_app(ctx, console=console)) as base:
        yield base


def sign_in(browser: Any, base_url: str, api_key: str) -> None:
    browser.get(f"{base_url}/console/sign-in")
    browser.find_element(By.ID, "api_key").send_keys(api_key, Keys.ENTER)
    assert shows(browser, "Search")


def wait_until(browser: Any, condition: Any, timeout: float = 30) -> None:
    WebDriverWait(browser, timeout, ignored_exceptions=[StaleElementReferenceException]).until(condition)


def test_a_reviewer_finds_a_user_by_address_and_reads_the_outbox_with_no_re_drive_offered(
    ctx: ServiceContext, browser: Any, base_url: str
) -> None:
    message = abandoned_message(ctx, user_id="7")
    sign_in(browser, base_url, create_client(ctx, "support").api_key)

    browser.find_element(By.ID, "q").send_keys("USER7@example.test", Keys.ENTER)
    assert shows(browser, "User 7")

    browser.find_element(By.LINK_TEXT, "Outbox").click()
    assert shows(browser, "Outbox")
    chart = browser.find_element(By.CSS_SELECTOR, "svg.outbox-chart")
    assert chart.get_attribute("role") == "img"
    assert browser.find_elements(By.CSS_SELECTOR, 'svg.outbox-chart rect[data-state="abandoned"][data-count="1"]')
    row = browser.find_element(By.CSS_SELECTOR, f'section[data-list="abandoned"] tr[data-message="{message}"]')
    assert "provider busy" in row.find_element(By.CLASS_NAME, "last-error").text
    assert browser.find_elements(By.CSS_SELECTOR, "form.redrive") == []
    shot(browser, "outbox-review")

    assert problems_in_console(browser) == []


def test_an_admin_re_drives_an_abandoned_message_and_a_key_that_lost_admin_is_refused(
    ctx: ServiceContext, browser: Any, base_url: str, scopes: dict[str, frozenset[str]]
) -> None:
    first, second = abandoned_message(ctx, user_id="7"), abandoned_message(ctx, user_id="8")
    sign_in(browser, base_url, create_client(ctx, "operator").api_key)
    browser.get(f"{base_url}/console/outbox")
    assert shows(browser, "Outbox")
    shot(browser, "outbox-admin")

    browser.find_element(By.ID, f"reason-{first}").send_keys("provider recovered, ticket 7", Keys.ENTER)
    wait_until(browser, lambda driver: driver.find_elements(By.CSS_SELECTOR, "p.notice[role=status]"))
    assert browser.find_element(By.CSS_SELECTOR, "p.notice").text.startswith("Re-driven")
    assert not browser.find_elements(By.CSS_SELECTOR, f'section[data-list="abandoned"] tr[data-message="{first}"]')
    shot(browser, "outbox-redriven")

    scopes["operator"] = REVIEW  # the key lost admin while the page was open
    browser.find_element(By.ID, f"reason-{second}").send_keys("ticket 8", Keys.ENTER)
    wait_until(browser, lambda driver: driver.find_elements(By.CSS_SELECTOR, "p.error[role=alert]"))
    assert "admin scope" in browser.find_element(By.CSS_SELECTOR, "p.error").text
    shot(browser, "outbox-redrive-refused")

    with ctx.engine.connect() as connection:
        redriven = connection.execute(text(
            "SELECT payload->>'message_id' FROM events WHERE event_type = 'DeliveryRedriven'")).scalars().all()
    assert redriven == [first]
    assert_projections_match_log(ctx.engine)
    [refusal] = problems_in_console(browser)  # the page's own 403, and nothing else (the log is read once)
    assert refusal.endswith("/console/outbox/redrive - Failed to load resource: the server responded with a status "
                            "of 403 (Forbidden)")


def test_the_audit_page_runs_a_verification_to_intact_with_progress_from_its_script(
    ctx: ServiceContext, browser: Any, base_url: str
) -> None:
    for user in range(5):
        request_reset(ctx, RequestReset(f"u{user}", f"u{user}@example.test"))
    seal(ctx.engine)
    sign_in(browser, base_url, create_client(ctx, "support").api_key)

    browser.find_element(By.LINK_TEXT, "Audit").click()
    assert shows(browser, "Audit")
    assert browser.find_element(By.ID, "last-sealed").text.startswith("The log was last sealed at")
    assert browser.find_element(By.PARTIAL_LINK_TEXT, "Download a signed digest")
    browser.find_element(By.XPATH, "//button[text()='Verify the chain']").click()

    wait_until(browser, lambda driver: driver.find_element(By.CSS_SELECTOR, "#verification .outcome").text == "intact")
    checked = browser.find_element(By.CSS_SELECTOR, "#verification .checked").text
    total = checked.split(" of ")[1]
    assert checked == f"{total} of {total}" and int(total) > 0
    assert browser.find_element(By.CSS_SELECTOR, "#verification .summary").text.startswith("ok: ")
    shot(browser, "audit")

    assert problems_in_console(browser) == []
