"""The tenant page in a real browser: a tenant's settings now and their history, takeovers set apart.

acme's settings are changed twice through the service (as the CLI and the
API change them): once its product name, once its sender and reset page. A
reviewer of acme signs in and reads the settings, the deployment's defaults
where acme set nothing, and the history newest first, where the change of
sender and reset page is marked and named as such; another tenant's
reviewer reads only its own tenant.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from infra.console.app import Console
from infra.http.app import create_app
from infra.services.tenants import configure_tenant
from infra.services.unit_of_work import ServiceContext
from tests.console.support import key_of
from tests.support.browser import accessibility_problems, needs_browser, problems_in_console, shows
from tests.support.browser import shot as save_shot
from tests.support.servers import served

pytestmark = needs_browser
pytest.importorskip("selenium", reason="selenium is not installed (pip install -e .[test])")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402


@pytest.fixture
def base_url(ctx: ServiceContext) -> Iterator[str]:
    with served(create_app(ctx, console=Console(ctx, idle=timedelta(minutes=15)))) as base:
        yield base


def sign_in(browser: Any, base_url: str, api_key: str) -> None:
    browser.get(f"{base_url}/console/sign-in")
    browser.find_element(By.ID, "api_key").send_keys(api_key, Keys.ENTER)
    assert shows(browser, "Search")


def setting(browser: Any, name: str) -> str:
    return browser.find_element(By.CSS_SELECTOR, f'tr[data-setting="{name}"] td').text


def test_a_reviewer_reads_the_tenants_settings_and_history_with_the_sender_change_set_apart(
    ctx: ServiceContext, browser: Any, base_url: str
) -> None:
    acme_key = key_of(ctx, "acme-support", "review", tenant="acme")
    configure_tenant(ctx, "acme", changes={"product_name": "Acme Books"}, actor="cli:ada", reason="launch OPS-1")
    configure_tenant(ctx, "acme", changes={"sender": "no-reply@acme.example", "reset_url": "https://acme.example/r"},
                     actor="client:acme-admin", reason="new domain OPS-2")
    shop_key = key_of(ctx, "shop-support", "review", tenant="shop")

    sign_in(browser, base_url, acme_key)
    browser.find_element(By.LINK_TEXT, "Tenant").click()
    assert shows(browser, "Tenant acme")
    assert setting(browser, "product_name") == "Acme Books"
    assert setting(browser, "sender") == "no-reply@acme.example"
    assert setting(browser, "reply_to") == "deployment default"
    assert "takeover-field" in browser.find_element(By.CSS_SELECTOR, 'tr[data-setting="sender"]').get_attribute("class")

    rows = browser.find_elements(By.CSS_SELECTOR, "table.history tbody tr")
    assert [row.get_attribute("data-version") for row in rows] == ["2", "1"]
    newest, oldest = rows
    assert "takeover" in newest.get_attribute("class") and "takeover" not in (oldest.get_attribute("class") or "")
    assert [li.text for li in newest.find_elements(By.CSS_SELECTOR, "li.takeover-change")] == [
        "Where links or mail go: Reset page: deployment default → https://acme.example/r",
        "Where links or mail go: Sender address: deployment default → no-reply@acme.example"]
    assert "client:acme-admin" in newest.text and "new domain OPS-2" in newest.text
    assert "Product name: deployment default → Acme Books" in oldest.text
    assert browser.find_element(By.ID, "takeover-notice").text.startswith("1 change below moved where")
    assert accessibility_problems(browser) == []
    save_shot(browser, "console", "tenant-settings")
    assert problems_in_console(browser) == []

    browser.delete_all_cookies()
    sign_in(browser, base_url, shop_key)
    browser.get(f"{base_url}/console/tenant")
    assert shows(browser, "Tenant shop")
    assert "acme" not in browser.page_source.lower().replace("tenant shop", "")
    assert browser.find_element(By.CSS_SELECTOR, "p.nothing").text == "No change yet."
