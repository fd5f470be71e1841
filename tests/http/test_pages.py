"""/docs (Swagger UI from a vendored package, strict CSP) and the development stand-in reset page."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest

from domain.reset import RequestReset
from infra.config.settings import Settings
from infra.http.serve import reset_page_enabled
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.http.support import asgi_client, log_size, token_for

pytestmark = pytest.mark.anyio


@pytest.fixture
async def browser(ctx: ServiceContext) -> AsyncIterator[httpx.AsyncClient]:
    """No API key: a person's browser, with the reset page switched on."""
    async with asgi_client(ctx, None, reset_page=True) as client:
        yield client


def csp(response: httpx.Response) -> dict[str, str]:
    return {d.split()[0]: d for d in (p.strip() for p in response.headers["content-security-policy"].split(";")) if d}


async def test_docs_is_swagger_ui_over_openapi_json_with_every_asset_from_the_package(
    browser: httpx.AsyncClient,
) -> None:
    page = await browser.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<h1>" in page.text
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page.text, re.S)
    assert scripts and all('src="/docs/assets/' in attrs and not body.strip() for attrs, body in scripts), \
        "no inline script"
    policy = csp(page)
    assert policy["script-src"] == "script-src 'self'"
    assert "unsafe-inline" not in policy["style-src"] and "unsafe-eval" not in page.headers["content-security-policy"]
    assert policy["default-src"] == "default-src 'none'"
    assets = re.findall(r'(?:src|href)="(/docs/assets/[^"]+)"', page.text)
    assert {a.rsplit("/", 1)[1] for a in assets} >= {"swagger-ui.css", "swagger-ui-bundle.js", "docs-init.js"}
    for asset in assets:
        answer = await browser.get(asset)
        assert answer.status_code == 200 and len(answer.content) > 0, asset
    bundle = await browser.get("/docs/assets/swagger-ui-bundle.js")
    assert "javascript" in bundle.headers["content-type"] and b"SwaggerUIBundle" in bundle.content
    init = (await browser.get("/docs/assets/docs-init.js")).text
    assert '"/openapi.json"' in init and "http" not in init.replace("window.location.href", ""), "no CDN, no host"
    document = await browser.get("/openapi.json")
    assert document.status_code == 200 and document.json()["openapi"].startswith("3.1")


@pytest.mark.parametrize("path", ["/docs/assets/index.html", "/docs/assets/..%2F..%2Fpages.py",
                                  "/docs/assets/swagger-ui-bundle.js.map", "/docs/assets/"])
async def test_only_the_listed_assets_are_served(browser: httpx.AsyncClient, path: str) -> None:
    assert (await browser.get(path)).status_code == 404


async def test_the_reset_page_is_off_unless_asked_for(ctx: ServiceContext) -> None:
    async with asgi_client(ctx, None) as client:
        assert (await client.get("/reset?token=x")).status_code == 404


def test_the_reset_page_is_on_for_the_embedded_default_and_by_setting_only() -> None:
    assert reset_page_enabled(Settings(), embedded=True)
    assert not reset_page_enabled(Settings(database_url="postgresql://db/x"), embedded=False)
    assert reset_page_enabled(Settings(database_url="postgresql://db/x", dev_reset_page=True), embedded=False)


def new_link(ctx: ServiceContext, user_id: str = "42") -> str:
    return token_for(ctx.engine, str(request_reset(ctx, RequestReset(user_id, "ada@example.test")).request_id))


def state_of(page: httpx.Response) -> str:
    found = re.search(r'data-state="([a-z]+)"', page.text)
    assert found, page.text
    return found.group(1)


def form_of(page: httpx.Response) -> dict[str, str]:
    return dict(re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)">', page.text))


async def test_the_page_shows_a_valid_link_and_its_button_consumes_it_once(
    ctx: ServiceContext, browser: httpx.AsyncClient, caplog: pytest.LogCaptureFixture,
) -> None:
    token = new_link(ctx)
    caplog.set_level(logging.INFO, logger="authledger")
    page = await browser.get("/reset", params={"token": token})
    assert page.status_code == 200 and state_of(page) == "valid"
    assert "Development stand-in" in page.text and "AUTHLEDGER_RESET_URL" in page.text
    assert page.headers["content-security-policy"].startswith("default-src 'none'") and "<script" not in page.text
    assert page.headers["cache-control"] == "no-store" and page.headers["referrer-policy"] == "no-referrer"
    assert 'method="post"' in page.text and '<button type="submit">' in page.text
    cookie = page.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict") and "Path=/reset" in cookie

    done = await browser.post("/reset", data=form_of(page))
    assert done.status_code == 200 and state_of(done) == "consumed"
    again = await browser.post("/reset", data=form_of(page))
    assert again.status_code == 400 and "already used" in again.text
    assert state_of(await browser.get("/reset", params={"token": token})) == "used"

    logged = " ".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert "http request" in logged and "/reset" in logged
    assert token not in logged, "the request log line never prints the token"


async def test_superseded_and_expired_links_are_named_and_get_no_button(
    ctx: ServiceContext, browser: httpx.AsyncClient,
) -> None:
    first = new_link(ctx)
    ctx.clock.advance(timedelta(minutes=2))
    second = new_link(ctx)
    page = await browser.get("/reset", params={"token": first})
    assert state_of(page) == "superseded" and "<form" not in page.text
    ctx.clock.advance(timedelta(hours=1))
    assert state_of(await browser.get("/reset", params={"token": second})) == "expired"
    assert state_of(await browser.get("/reset", params={"token": "not-a-token"})) == "unknown"


async def test_a_post_without_the_csrf_cookie_or_with_another_token_is_refused_and_writes_nothing(
    ctx: ServiceContext, browser: httpx.AsyncClient,
) -> None:
    token = new_link(ctx)
    page = await browser.get("/reset", params={"token": token})
    form, before = form_of(page), log_size(ctx.engine)
    forged = await browser.post("/reset", data={**form, "csrf_token": "x" * 43})
    assert forged.status_code == 403
    browser.cookies.clear()
    no_cookie = await browser.post("/reset", data=form)
    assert no_cookie.status_code == 403
    assert log_size(ctx.engine) == before, "nothing written"
    assert token not in forged.text + no_cookie.text


@pytest.mark.parametrize("body, headers", [
    (b"", {}),
    (b'{"token": "x"}', {"content-type": "application/json"}),
    (b"token=a&token=b&csrf_token=c", {"content-type": "application/x-www-form-urlencoded"}),
    (b"token=" + b"a" * 5000, {"content-type": "application/x-www-form-urlencoded"}),
    (b"\xff\xfe", {"content-type": "application/x-www-form-urlencoded"}),
])
async def test_a_malformed_post_is_a_clear_400(
    browser: httpx.AsyncClient, body: bytes, headers: dict[str, str],
) -> None:
    answer = await browser.post("/reset", content=body, headers=headers)
    assert answer.status_code == 400 and "Traceback" not in answer.text


async def test_the_page_without_a_token_says_where_it_opens_from(browser: httpx.AsyncClient) -> None:
    answer = await browser.get("/reset")
    assert answer.status_code == 400 and "link in a reset email" in answer.text
