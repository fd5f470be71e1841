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
from tests.console.support import (
    NO_EMAIL_ANSWERS, STALE_LINK_ANSWERS, TWO_EMAILS_ANSWERS,
    a_code_entered_wrong_twice_then_right_and_again_hours_later, key_of,
)
from tests.support.browser import accessibility_problems, navigates, needs_browser, problems_in_console, shows
from tests.support.browser import shot as save_shot
from tests.support.cli import Env, process_env
from tests.support.incidents import START, WEB, duplicate_emails, missing_email, stale_link
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
def more_cases(ctx: ServiceContext, engine: Engine, case: dict[str, UUID]) -> UUID:
    """Beside ``case`` (user 42's two emails): user 7's email that never came, user 9's link replaced by a
    newer one, and user 5's code entered wrong twice then right, and presented again three hours later."""
    missing_email(ctx, engine)
    stale_link(ctx, engine)
    return a_code_entered_wrong_twice_then_right_and_again_hours_later(ctx)


@pytest.fixture
def review_key(ctx: ServiceContext) -> str:
    return key_of(ctx, "support", "review")


@pytest.fixture
def base_url(env: Env, tmp_path: Path, case: dict[str, UUID], more_cases: UUID) -> Iterator[str]:
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
    assert [a.text for a in browser.find_elements(By.CSS_SELECTOR, "nav a")] == ["Search", "Outbox", "Audit", "Tenant"]
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


# What a mark of the timeline is: its point shapes, and every text (labels, lane names, the axis' times).
MARKS = ", ".join(f"svg.timeline [data-kind={kind}]" for kind in (
    "request", "verification", "queued", "attempt", "skipped", "abandoned", "redriven", "feedback", "fact",
)) + ", svg.timeline text"
BOXES = """
const svg = document.querySelector("svg.timeline");
const box = (element) => { const b = element.getBBox();
  return {what: element.getAttribute("data-kind") || element.textContent, x: b.x, y: b.y, w: b.width, h: b.height}; };
const view = svg.viewBox.baseVal;
return {view: {x: view.x, y: view.y, w: view.width, h: view.height},
        marks: Array.from(document.querySelectorAll(arguments[0])).map(box),
        all: Array.from(svg.querySelectorAll("*")).filter((e) => e instanceof SVGGraphicsElement).map(box)};
"""


def overlapping(boxes: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Pairs of boxes that cover one another (by more than half a pixel each way)."""
    return [(a["what"], b["what"]) for i, a in enumerate(boxes) for b in boxes[i + 1:]
            if min(a["x"] + a["w"], b["x"] + b["w"]) - max(a["x"], b["x"]) > 0.5
            and min(a["y"] + a["h"], b["y"] + b["h"]) - max(a["y"], b["y"]) > 0.5]


def outside(boxes: list[dict[str, Any]], view: dict[str, float]) -> list[str]:
    return [b["what"] for b in boxes if b["x"] < view["x"] - 0.5 or b["y"] < view["y"] - 0.5
            or b["x"] + b["w"] > view["x"] + view["w"] + 0.5 or b["y"] + b["h"] > view["y"] + view["h"] + 0.5]


def answers(browser: Any) -> list[tuple[str, str]]:
    return [(row.find_element(By.TAG_NAME, "dt").text, row.find_element(By.TAG_NAME, "dd").text)
            for row in browser.find_elements(By.CSS_SELECTOR, "section.glance dl.answers > div")]


def test_each_case_page_answers_its_complaint_word_for_word_and_its_timeline_marks_neither_overlap_nor_leave_it(
    browser: Any, base_url: str, review_key: str, more_cases: UUID
) -> None:
    browser.get(f"{base_url}/console/sign-in")
    browser.find_element(By.ID, "api_key").send_keys(review_key, Keys.ENTER)
    assert shows(browser, "Search")

    for user, expected in (("42", TWO_EMAILS_ANSWERS), ("7", NO_EMAIL_ANSWERS), ("9", STALE_LINK_ANSWERS)):
        browser.get(f"{base_url}/console/case?kind=user&id={user}")
        assert shows(browser, f"User {user}")
        assert answers(browser) == expected, user
        shot(browser, f"glance-user-{user}")

    for user in ("42", "7", "9", "5"):
        browser.get(f"{base_url}/console/case?kind=user&id={user}")
        assert shows(browser, f"User {user}")
        found = browser.execute_script(BOXES, MARKS)
        assert len(found["marks"]) > 5, user
        assert overlapping(found["marks"]) == [], user
        assert outside(found["all"], found["view"]) == [], user
        browser.execute_script("document.getElementById('timeline').scrollIntoView();")
        shot(browser, f"timeline-user-{user}")

    # User 5's page: the three presentations of one second are three marks, and the late one lies past a cut.
    outcomes = [shape.get_attribute("data-outcome") for shape in browser.find_elements(
        By.CSS_SELECTOR, "svg.timeline [data-kind=verification]")]
    assert outcomes == ["failed", "failed", "verified", "rejected"]
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.timeline [data-kind=axis-break]")) == 1
    assert problems_in_console(browser) == []


def test_a_short_id_shows_the_whole_id_on_hover_and_a_click_copies_it(
    browser: Any, base_url: str, review_key: str, case: dict[str, UUID]
) -> None:
    browser.execute_cdp_cmd("Browser.grantPermissions", {
        "origin": base_url, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
    browser.get(f"{base_url}/console/sign-in")
    browser.find_element(By.ID, "api_key").send_keys(review_key, Keys.ENTER)
    assert shows(browser, "Search")
    browser.get(f"{base_url}/console/case?kind=user&id=42")
    assert shows(browser, "User 42")

    whole = str(case["second_message"])
    button = browser.find_element(By.CSS_SELECTOR, f"section.glance dl.answers button.id[data-copy='{whole}']")
    assert (button.text, button.get_attribute("title")) == ("…" + whole[-8:], whole)
    button.click()

    WebDriverWait(browser, 10).until(lambda driver: button.get_attribute("data-copied") == "yes")
    assert browser.execute_async_script(
        "navigator.clipboard.readText().then(arguments[0], () => arguments[0](null));") == whole
    assert problems_in_console(browser) == []
