"""/docs and the stand-in reset page in a real browser (tests/support/browser.py's chromium, the one harness):
Swagger UI draws every operation, and neither page's Content-Security-Policy blocks anything (no console
message at all). Screenshots land in test-artifacts/pages/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from domain.reset import RequestReset
from infra.http.app import create_app
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.http.support import token_for
from tests.support.browser import needs_browser, shot
from tests.support.servers import served

pytestmark = needs_browser
pytest.importorskip("selenium", reason="selenium is not installed (pip install -e .[test])")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402


@pytest.fixture
def base_url(ctx: ServiceContext) -> Iterator[str]:
    """The real app, with the reset page, under uvicorn on a free port."""
    with served(create_app(ctx, reset_page=True)) as base:
        yield base


def every_console_message(browser: Any) -> list[str]:
    """Everything the page logged to the console, at any level: these pages are to log nothing."""
    return [f"{entry['level']} {entry['message']}" for entry in browser.get_log("browser")]


def test_swagger_ui_renders_every_operation_with_no_csp_violation(browser: Any, base_url: str) -> None:
    browser.get(f"{base_url}/docs")
    WebDriverWait(browser, 30).until(lambda driver: driver.find_elements(By.CSS_SELECTOR, "[data-path]"))
    paths = {element.get_attribute("data-path") for element in browser.find_elements(By.CSS_SELECTOR, "[data-path]")}
    shot(browser, "pages", "docs")

    assert every_console_message(browser) == [], "the page logged to the console"
    assert "/v1/password-resets" in paths and "/v1/timeline" in paths, paths


def test_the_reset_page_loads_with_no_csp_violation(ctx: ServiceContext, browser: Any, base_url: str) -> None:
    token = token_for(ctx.engine, str(request_reset(ctx, RequestReset("42", "ada@example.test")).request_id))

    browser.get(f"{base_url}/reset?token={token}")
    shot(browser, "pages", "reset")

    assert every_console_message(browser) == [], "the page logged to the console"
    assert browser.find_elements(By.CSS_SELECTOR, '[data-state="valid"]')
    assert "Development stand-in" in browser.page_source
