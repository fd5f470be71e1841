"""The one way the tests drive a real browser: Debian's chromium through chromedriver, with Selenium.

Nothing is downloaded at test time: without the system's chromium and
chromedriver (or without selenium) a browser test skips and says why; CI's
.ci/run installs both. Modules mark themselves with ``needs_browser`` and
take the ``browser`` fixture (a conftest imports it). ``shot`` saves a
screenshot under test-artifacts/; ``problems_in_console`` is what chromium
logged at WARNING or SEVERE, which includes every JavaScript error and every
Content-Security-Policy violation; ``accessibility_problems`` names a
page's unlabelled fields, mute buttons or missing h1; ``shows`` waits for
the page with a given heading and ``navigates`` for the browser to leave the
page it is on.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
HAS_SELENIUM = importlib.util.find_spec("selenium") is not None
MISSING = ("chromium and chromedriver are not installed: `apt-get install chromium chromium-driver`"
           if CHROMIUM is None or CHROMEDRIVER is None else
           "selenium is not installed (pip install -e .[test])" if not HAS_SELENIUM else None)
needs_browser = [pytest.mark.slow, pytest.mark.skipif(MISSING is not None, reason=MISSING or "")]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless chromium, logging its console; quit after the test."""
    if MISSING is not None:
        pytest.skip(MISSING)
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,1000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    driver.implicitly_wait(5)
    try:
        yield driver
    finally:
        driver.quit()


def shot(browser: Any, folder: str, name: str) -> None:
    """A screenshot of the page as it stands, kept as a test artifact."""
    (ARTIFACTS / folder).mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / folder / f"{name}.png"))


def problems_in_console(browser: Any) -> list[str]:
    """JavaScript errors and CSP violations: chromium logs both at SEVERE (and some at WARNING)."""
    return [entry["message"] for entry in browser.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")]


def accessibility_problems(browser: Any) -> list[str]:
    """What keeps the page from a keyboard or a screen reader: no single h1, a field with no label, a mute button."""
    from selenium.webdriver.common.by import By

    problems = [] if len(browser.find_elements(By.TAG_NAME, "h1")) == 1 else ["the page has not exactly one h1"]
    for field in browser.find_elements(By.CSS_SELECTOR, "input:not([type=hidden]), select, textarea"):
        name = field.get_attribute("id") or field.get_attribute("name")
        labelled = field.get_attribute("aria-label") or (field.get_attribute("id") and browser.find_elements(
            By.CSS_SELECTOR, f'label[for="{field.get_attribute("id")}"]'))
        if not labelled:
            problems.append(f"the field {name!r} has no label")
    problems += [f"a button with no text in {button.get_attribute('outerHTML')[:80]}"
                 for button in browser.find_elements(By.TAG_NAME, "button") if not button.text.strip()]
    return problems


def shows(browser: Any, heading: str) -> bool:
    """Wait for the page whose h1 is ``heading`` (a submitted form navigates after send_keys returns).

    The heading is read in one script call: finding the h1 and then asking for
    its text are two round trips, and a navigation landing between them makes
    chromium answer "Node with given id does not belong to the document".
    """
    from selenium.common.exceptions import TimeoutException, WebDriverException
    from selenium.webdriver.support.wait import WebDriverWait

    def arrived(driver: Any) -> bool:
        return driver.execute_script(
            "const h1 = document.querySelector('h1'); return h1 ? h1.innerText.trim() : null;") == heading

    try:
        WebDriverWait(browser, 10, ignored_exceptions=[WebDriverException]).until(arrived)
    except TimeoutException:
        raise AssertionError(f"expected the page {heading!r}, got {browser.title!r} at {browser.current_url}") from None
    return True


@contextmanager
def navigates(browser: Any) -> Iterator[None]:
    """Wait, on leaving the block, until the browser has loaded another page.

    For a form that lands on a page with the same heading (a search that finds
    nothing, a re-drive): without it the next lookup may still find the old
    page's elements. The old page is marked with a window property, which a
    new page does not have; Selenium's ``staleness_of`` won't do, because this
    chromedriver reports an element of a departed page as an "unhandled
    inspector error" rather than as stale.
    """
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.wait import WebDriverWait

    browser.execute_script("window.authledgerOldPage = true;")
    yield
    WebDriverWait(browser, 10, ignored_exceptions=[WebDriverException]).until(lambda driver: driver.execute_script(
        "return window.authledgerOldPage !== true && document.readyState === 'complete';"))
