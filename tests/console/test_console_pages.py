"""The console's pages through the whole ASGI stack: sign-in, sessions, CSRF, search, the case page."""

from __future__ import annotations

from markupsafe import escape
from collections.abc import Iterator
from datetime import timedelta
from uuid import UUID

import httpx
import pytest

from infra.clock import ManualClock
from infra.console.app import Console
from infra.console.shell import CSP
from infra.http.app import create_app
from infra.review.history import explain, history
from infra.services.clients import revoke_client
from infra.services.unit_of_work import ServiceContext
from tests.console.support import Browser, csrf_of, key_of, sign_in
from tests.support.incidents import duplicate_emails, later
from tests.support.replay import assert_projections_match_log

@pytest.fixture
def console(ctx: ServiceContext) -> Console:
    return Console(ctx, idle=timedelta(minutes=15))


@pytest.fixture
def browser(ctx: ServiceContext, console: Console) -> Iterator[Browser]:
    client = Browser(create_app(ctx, console=console))
    yield client
    client.close()


@pytest.fixture
def review_key(ctx: ServiceContext) -> str:
    return key_of(ctx, "support", "review")


@pytest.fixture
def incident(ctx: ServiceContext) -> dict[str, UUID]:
    return duplicate_emails(ctx, ctx.engine)


def test_every_console_page_carries_a_strict_content_security_policy(browser: Browser) -> None:
    for path in ("/console/sign-in", "/console/", "/console/static/console.css"):
        headers = browser.get(path).headers
        assert headers["content-security-policy"] == CSP, path
        assert (headers["x-content-type-options"], headers["referrer-policy"]) == ("nosniff", "no-referrer")
    assert "'unsafe-inline'" not in CSP and "frame-ancestors 'none'" in CSP and "form-action 'self'" in CSP


def test_a_review_key_is_exchanged_for_an_http_only_strict_cookie_that_does_not_hold_the_key(
    browser: Browser, review_key: str
) -> None:
    answer = sign_in(browser, review_key)

    assert answer.status_code == 303 and answer.headers["location"] == "/console/"
    cookie = answer.headers["set-cookie"]
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower() and "secure" not in cookie.lower()
    assert review_key not in cookie
    page = browser.get("/console/")
    assert page.status_code == 200 and "<h1>Search</h1>" in page.text and "client support" in page.text


def test_under_https_the_session_cookie_is_secure(ctx: ServiceContext, console: Console, review_key: str) -> None:
    client = Browser(create_app(ctx, console=console), "https://authledger.test")
    try:
        assert "secure" in sign_in(client, review_key).headers["set-cookie"].lower()
    finally:
        client.close()


def test_an_unknown_key_and_a_key_without_the_review_scope_are_refused_with_a_clear_message(
    ctx: ServiceContext, browser: Browser
) -> None:
    sender_key = key_of(ctx, "sender", "send", "verify")

    unknown, lacking = sign_in(browser, "alk_nothing"), sign_in(browser, sender_key)

    assert unknown.status_code == 401 and "That API key is unknown or revoked." in unknown.text
    assert lacking.status_code == 403 and "lacks the review scope" in lacking.text
    assert "set-cookie" not in lacking.headers or "authledger_console=" not in lacking.headers["set-cookie"]
    assert browser.get("/console/", follow_redirects=False).headers["location"] == "/console/sign-in"


def test_forms_without_their_csrf_token_are_refused_and_change_nothing(browser: Browser, review_key: str) -> None:
    forged = browser.post("/console/sign-in", data={"csrf": "guess", "api_key": review_key}, follow_redirects=False)
    assert forged.status_code == 403 and "authledger_console=" not in forged.headers.get("set-cookie", "")

    sign_in(browser, review_key)
    assert browser.post("/console/sign-out", data={"csrf": "guess"}).status_code == 403
    assert browser.post("/console/search", data={"q": "42"}).status_code == 403
    assert browser.get("/console/").status_code == 200, "still signed in"


def test_signing_out_ends_the_session(browser: Browser, review_key: str) -> None:
    sign_in(browser, review_key)
    page = browser.get("/console/")

    out = browser.post("/console/sign-out", data={"csrf": csrf_of(page)}, follow_redirects=False)

    assert out.headers["location"] == "/console/sign-in?ended=signed-out"
    assert browser.get("/console/", follow_redirects=False).status_code == 303


def test_revoking_the_key_ends_the_session_at_the_next_request(
    ctx: ServiceContext, browser: Browser, review_key: str
) -> None:
    sign_in(browser, review_key)
    revoke_client(ctx, "support")

    answer = browser.get("/console/", follow_redirects=False)

    assert answer.headers["location"] == "/console/sign-in?ended=revoked"
    assert "no longer works" in browser.get(answer.headers["location"]).text


def test_a_session_ends_after_the_idle_timeout(browser: Browser, review_key: str, clock: ManualClock) -> None:
    sign_in(browser, review_key)
    clock.advance(14 * 60)
    assert browser.get("/console/", follow_redirects=False).status_code == 200, "each request restarts the wait"
    clock.advance(15 * 60 + 1)

    assert browser.get("/console/", follow_redirects=False).headers["location"] == "/console/sign-in?ended=idle"


def search(browser: Browser, query: str) -> httpx.Response:
    page = browser.get("/console/")
    return browser.post("/console/search", data={"csrf": csrf_of(page), "q": query}, follow_redirects=False)


def test_search_by_user_request_or_message_id_lands_on_its_case_page(
    browser: Browser, review_key: str, incident: dict[str, UUID]
) -> None:
    sign_in(browser, review_key)
    for query, kind in [("42", "user"), (str(incident["first_request"]), "request"),
                        (str(incident["second_message"]), "message")]:
        answer = search(browser, query)
        assert answer.status_code == 303 and answer.headers["location"] == f"/console/case?kind={kind}&id={query}"


def test_unknown_ids_and_another_tenants_ids_answer_nothing_found_the_same_way(
    ctx: ServiceContext, browser: Browser, incident: dict[str, UUID]
) -> None:
    sign_in(browser, key_of(ctx, "acme", "review", tenant="acme"))  # tenant acme's key; the incident is default's

    answers = [search(browser, q) for q in ("42", str(incident["first_request"]), str(UUID(int=7)), "nobody")]
    cases = [browser.get(f"/console/case?kind={k}&id={v}") for k, v in
             [("user", "42"), ("request", incident["first_request"]), ("message", incident["second_message"])]]

    assert {a.status_code for a in answers} == {200} and {c.status_code for c in cases} == {404}
    assert len({a.text.replace(csrf_of(a), "") for a in answers + cases}) == 1
    assert "Nothing found." in answers[0].text


def test_the_case_page_tells_the_explain_sentences_word_for_word_and_draws_the_leases(
    ctx: ServiceContext, browser: Browser, review_key: str, incident: dict[str, UUID], clock: ManualClock
) -> None:
    clock.advance(later() - clock.now())
    sign_in(browser, review_key)

    page = browser.get(f"/console/case?kind=request&id={incident['first_request']}")
    user = browser.get("/console/case?kind=user&id=42")

    expected = explain(ctx.engine, request_id=incident["first_request"], now=clock.now())
    assert page.status_code == 200
    for finding in expected.findings:
        assert f'<li class="sentence">{escape(finding.sentence)!s}</li>' in page.text
    for finding in history(ctx.engine, "42", now=clock.now()).findings:
        assert str(escape(finding.sentence)) in user.text
    assert 'data-kind="lease"' in user.text and 'data-outcome="expired"' in user.text
    assert 'data-kind="supersession"' in page.text
    assert_projections_match_log(ctx.engine)


@pytest.mark.parametrize("path", ["/console/case?kind=nope&id=1", "/console/case?kind=request&id=not-a-uuid",
                                  "/console/case?kind=user&id=" + "x" * 500, "/console/case"])
def test_a_bad_case_address_is_nothing_found_not_an_error(browser: Browser, review_key: str, path: str) -> None:
    sign_in(browser, review_key)
    answer = browser.get(path)
    assert answer.status_code == 404 and "Nothing found." in answer.text


def test_an_oversized_or_non_form_post_is_refused(browser: Browser, review_key: str) -> None:
    sign_in(browser, review_key)
    csrf = csrf_of(browser.get("/console/"))
    big = browser.post("/console/search", data={"csrf": csrf, "q": "x" * 20_000})
    as_json = browser.post("/console/search", json={"csrf": csrf, "q": "42"})
    assert big.status_code == 403 and as_json.status_code == 403
    assert "Reload the page" in big.text
