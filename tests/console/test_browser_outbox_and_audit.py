"""The outbox, audit and erase pages, address search and tenants, in a real browser (tests/support/browser.py).

The app runs in-process under uvicorn over the test's context, and every
session signs in with a real key: a client of a real tenant holding real
scopes (review; review and admin), so the admin's forms and a review key's
refusals are the product's own. Screenshots land in test-artifacts/console/.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text

from domain.reset import RequestReset
from infra.audit.seal import seal
from infra.console.app import Console
from infra.http.app import create_app
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.console.support import key_of
from tests.console.test_outbox_and_audit_pages import abandoned_message
from tests.support.browser import accessibility_problems, navigates, needs_browser, problems_in_console, shows
from tests.support.keys import TEST_SIGNING_KEY
from tests.support.servers import served
from tests.support.browser import shot as save_shot
from tests.support.replay import assert_projections_match_log

pytestmark = needs_browser
pytest.importorskip("selenium", reason="selenium is not installed (pip install -e .[test])")
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402



def shot(browser: Any, name: str) -> None:
    save_shot(browser, "console", name)


@pytest.fixture
def base_url(ctx: ServiceContext) -> Iterator[str]:
    console = Console(ctx, idle=timedelta(minutes=15), signing_key=lambda: TEST_SIGNING_KEY)
    with served(create_app(ctx, console=console)) as base:
        yield base


def sign_in(browser: Any, base_url: str, api_key: str) -> None:
    browser.get(f"{base_url}/console/sign-in")
    browser.find_element(By.ID, "api_key").send_keys(api_key, Keys.ENTER)
    assert shows(browser, "Search")


def sign_out(browser: Any) -> None:
    browser.find_element(By.XPATH, "//button[text()='Sign out']").click()
    assert shows(browser, "Sign in")


def forge(browser: Any, path: str, **fields: str) -> None:
    """Post a form the page did not offer, with the session's own CSRF token, as a hand-made request would."""
    csrf = browser.find_element(By.CSS_SELECTOR, "input[name=csrf]").get_attribute("value")
    browser.execute_script("""
        const form = document.createElement("form");
        form.method = "post";
        form.action = arguments[0];
        for (const [name, value] of Object.entries(arguments[1])) {
            const field = document.createElement("input");
            field.type = "hidden"; field.name = name; field.value = value;
            form.appendChild(field);
        }
        document.body.appendChild(form);
        form.submit();
    """, path, {"csrf": csrf, **fields})


def event_count(ctx: ServiceContext, event_type: str | None = None) -> int:
    with ctx.engine.connect() as connection:
        return connection.execute(text(
            "SELECT count(*) FROM events WHERE CAST(:type AS text) IS NULL OR event_type = :type"),
            {"type": event_type}).scalar_one()


def wait_for_the_page(browser: Any, condition: Any, timeout: float = 30) -> None:
    WebDriverWait(browser, timeout, ignored_exceptions=[StaleElementReferenceException]).until(condition)


def test_a_reviewer_finds_a_user_by_address_and_reads_the_outbox_with_no_re_drive_offered(
    ctx: ServiceContext, browser: Any, base_url: str
) -> None:
    message = abandoned_message(ctx, user_id="7")
    sign_in(browser, base_url, key_of(ctx, "support", "review"))

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


def test_an_admin_re_drives_an_abandoned_message_and_a_review_keys_forged_re_drive_is_refused(
    ctx: ServiceContext, browser: Any, base_url: str
) -> None:
    first, second = abandoned_message(ctx, user_id="7"), abandoned_message(ctx, user_id="8")
    sign_in(browser, base_url, key_of(ctx, "operator", "review", "admin"))
    browser.get(f"{base_url}/console/outbox")
    assert shows(browser, "Outbox")
    assert accessibility_problems(browser) == []
    shot(browser, "outbox-admin")

    with navigates(browser):
        browser.find_element(By.ID, f"reason-{first}").send_keys("provider recovered, ticket 7", Keys.ENTER)
    wait_for_the_page(browser, lambda driver: driver.find_elements(By.CSS_SELECTOR, "p.notice[role=status]"))
    assert browser.find_element(By.CSS_SELECTOR, "p.notice").text.startswith("Re-driven")
    assert not browser.find_elements(By.CSS_SELECTOR, f'section[data-list="abandoned"] tr[data-message="{first}"]')
    shot(browser, "outbox-redriven")
    sign_out(browser)

    sign_in(browser, base_url, key_of(ctx, "support", "review"))
    browser.get(f"{base_url}/console/outbox")
    assert shows(browser, "Outbox")
    assert browser.find_elements(By.CSS_SELECTOR, "form.redrive") == []
    before = event_count(ctx)
    forge(browser, "/console/outbox/redrive", message_id=second, reason="ticket 8")
    assert shows(browser, "Not done")
    assert "admin scope" in browser.find_element(By.CSS_SELECTOR, "p.error[role=alert]").text
    shot(browser, "outbox-redrive-refused")

    assert event_count(ctx) == before
    with ctx.engine.connect() as connection:
        redriven = connection.execute(text(
            "SELECT payload->>'message_id' FROM events WHERE event_type = 'DeliveryRedriven'")).scalars().all()
    assert redriven == [first]
    assert_projections_match_log(ctx.engine)
    [refusal] = problems_in_console(browser)  # the forged post's own 403, and nothing else
    assert refusal.endswith("/console/outbox/redrive - Failed to load resource: the server responded with a status "
                            "of 403 (Forbidden)")


def test_an_admin_erases_a_user_from_the_case_page_with_a_reason_and_a_confirmation_using_the_keyboard(
    ctx: ServiceContext, browser: Any, base_url: str
) -> None:
    request_reset(ctx, RequestReset("7", "user7@example.test"))
    sign_in(browser, base_url, key_of(ctx, "operator", "review", "admin"))
    browser.get(f"{base_url}/console/case?kind=user&id=7")
    assert shows(browser, "User 7")
    assert "user7@example.test" in addresses(browser)
    assert accessibility_problems(browser) == []
    assert browser.find_element(By.CSS_SELECTOR, "label[for=erase-reason]").text.startswith("Reason")

    browser.find_element(By.ID, "erase-reason").send_keys("ticket 7: the user asked to be forgotten", Keys.ENTER)
    assert shows(browser, "Erase user 7?")
    assert browser.find_element(By.CSS_SELECTOR, "q.reason").text == "ticket 7: the user asked to be forgotten"
    assert accessibility_problems(browser) == []
    assert event_count(ctx, "SubjectErased") == 0, "the first step only asks"
    shot(browser, "case-erase-confirm")
    for _ in range(20):  # the keyboard alone reaches the confirming button
        if browser.switch_to.active_element.text == "Erase user 7":
            break
        browser.switch_to.active_element.send_keys(Keys.TAB)
    browser.switch_to.active_element.send_keys(Keys.ENTER)

    assert shows(browser, "User 7")
    assert browser.find_element(By.CSS_SELECTOR, "p.notice[role=status]").text.startswith("Erased")
    assert addresses(browser) == {"[erased]", ""}
    assert "user7@example.test" not in browser.page_source and "enc:v1:" not in browser.page_source
    assert browser.find_elements(By.CSS_SELECTOR, "svg.timeline [data-kind=erasure]")
    shot(browser, "case-erased")
    with ctx.engine.connect() as connection:
        erased = connection.execute(
            text("SELECT payload, metadata FROM events WHERE event_type = 'SubjectErased'")).one()
    assert erased.payload["reason"] == "ticket 7: the user asked to be forgotten"
    assert erased.metadata["client"] == "operator"
    assert_projections_match_log(ctx.engine)
    assert problems_in_console(browser) == []


def test_a_review_key_sees_no_erase_form_and_its_forged_erase_is_refused_with_nothing_written(
    ctx: ServiceContext, browser: Any, base_url: str
) -> None:
    request_reset(ctx, RequestReset("7", "user7@example.test"))
    sign_in(browser, base_url, key_of(ctx, "support", "review"))
    browser.get(f"{base_url}/console/case?kind=user&id=7")
    assert shows(browser, "User 7")
    assert browser.find_elements(By.CSS_SELECTOR, "form.erase") == []
    before = event_count(ctx)

    forge(browser, "/console/case/erase", user_id="7", reason="ticket 7", confirm="yes")

    assert shows(browser, "Not done")
    assert "admin scope" in browser.find_element(By.CSS_SELECTOR, "p.error[role=alert]").text
    shot(browser, "case-erase-refused")
    assert event_count(ctx) == before
    [refusal] = problems_in_console(browser)
    assert refusal.endswith("/console/case/erase - Failed to load resource: the server responded with a status "
                            "of 403 (Forbidden)")


def test_another_tenants_review_key_finds_nothing_by_any_id_or_address(
    ctx: ServiceContext, browser: Any, base_url: str
) -> None:
    outcome = request_reset(ctx, RequestReset("7", "user7@example.test"))
    sign_in(browser, base_url, key_of(ctx, "support", "review"))
    browser.find_element(By.ID, "q").send_keys("user7@example.test", Keys.ENTER)
    assert shows(browser, "User 7"), "the default tenant's reviewer finds the user: the search works"
    sign_out(browser)

    sign_in(browser, base_url, key_of(ctx, "acme-support", "review", tenant="acme"))
    for query in ("7", str(outcome.request_id), str(outcome.message_id), "user7@example.test"):
        field = browser.find_element(By.ID, "q")
        field.clear()
        with navigates(browser):
            field.send_keys(query, Keys.ENTER)
        wait_for_the_page(browser,
                          lambda driver: driver.find_element(By.CLASS_NAME, "nothing").text == "Nothing found.")
        assert shows(browser, "Search")
    shot(browser, "search-other-tenant")
    for kind, value in (("user", "7"), ("request", outcome.request_id), ("message", outcome.message_id)):
        browser.get(f"{base_url}/console/case?kind={kind}&id={value}")
        assert browser.find_element(By.CLASS_NAME, "nothing").text == "Nothing found."
    assert "user7@example.test" not in browser.page_source
    problems = problems_in_console(browser)
    assert len(problems) == 3 and all(p.endswith("status of 404 (Not Found)") for p in problems), (
        "the three case pages' own 404s, and nothing else")


def addresses(browser: Any) -> set[str]:
    """The case page's event list, its address column."""
    return {cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "table.events tbody td.address")}


def test_the_audit_page_runs_a_verification_to_intact_with_progress_from_its_script(
    ctx: ServiceContext, browser: Any, base_url: str
) -> None:
    for user in range(5):
        request_reset(ctx, RequestReset(f"u{user}", f"u{user}@example.test"))
    seal(ctx.engine)
    sign_in(browser, base_url, key_of(ctx, "support", "review"))

    browser.find_element(By.LINK_TEXT, "Audit").click()
    assert shows(browser, "Audit")
    assert browser.find_element(By.ID, "last-sealed").text.startswith("The log was last sealed at")
    assert browser.find_element(By.PARTIAL_LINK_TEXT, "Download a signed digest")
    browser.find_element(By.XPATH, "//button[text()='Verify the chain']").click()

    wait_for_the_page(browser,
                      lambda driver: driver.find_element(By.CSS_SELECTOR, "#verification .outcome").text == "intact")
    checked = browser.find_element(By.CSS_SELECTOR, "#verification .checked").text
    total = checked.split(" of ")[1]
    assert checked == f"{total} of {total}" and int(total) > 0
    assert browser.find_element(By.CSS_SELECTOR, "#verification .summary").text.startswith("ok: ")
    shot(browser, "audit")

    assert problems_in_console(browser) == []
