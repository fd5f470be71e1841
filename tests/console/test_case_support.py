"""The case page's support forms, through the whole ASGI stack with real scoped keys: invalidate and resend.

Each posts with the session's CSRF token; bad input is answered on the case
page with what was wrong and nothing written; a done action redirects to
the case page, which tells it.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import text

from domain.reset import RequestReset
from infra.console.app import Console
from infra.http.app import create_app
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.console.support import Browser, csrf_of, key_of, sign_in
from tests.support.replay import assert_projections_match_log

ADA = "ada@example.test"
REASON = "ticket 4711: the user reports a link they did not ask for"


@pytest.fixture
def browser(ctx: ServiceContext) -> Iterator[Browser]:
    client = Browser(create_app(ctx, console=Console(ctx, idle=timedelta(minutes=15))))
    yield client
    client.close()


@pytest.fixture
def ada(ctx: ServiceContext) -> None:
    request_reset(ctx, RequestReset("42", ADA))


def signed_in(browser: Browser, ctx: ServiceContext, *scopes: str) -> httpx.Response:
    assert sign_in(browser, key_of(ctx, "helpdesk", *scopes)).status_code == 303
    return browser.get("/console/case?kind=user&id=42")


def events(ctx: ServiceContext) -> int:
    with ctx.engine.connect() as connection:
        return connection.execute(text("SELECT count(*) FROM events")).scalar_one()


def post(browser: Browser, page: httpx.Response, action: str, **fields: str) -> httpx.Response:
    return browser.post(f"/console/case/{action}", data={"csrf": csrf_of(page), "user_id": "42", **fields},
                        follow_redirects=False)


def test_an_admin_invalidates_the_users_open_link_and_the_case_page_tells_it(
    ada: None, ctx: ServiceContext, browser: Browser
) -> None:
    page = signed_in(browser, ctx, "review", "admin")
    assert 'action="/console/case/invalidate"' in page.text and '<label for="invalidate-reason">' in page.text

    done = post(browser, page, "invalidate", reason=REASON)

    assert done.status_code == 303 and done.headers["location"] == "/console/case?kind=user&id=42&done=invalidated"
    after = browser.get(done.headers["location"])
    assert "Invalidated: the user&#39;s open links and codes no longer work" in after.text
    assert "was invalidated by support (client:helpdesk) at" in after.text
    assert "<td>ResetInvalidated</td>" in after.text
    with ctx.engine.connect() as connection:
        recorded = connection.execute(text(
            "SELECT payload, metadata FROM events WHERE event_type = 'ResetInvalidated'")).one()
    assert recorded.payload["reason"] == REASON and recorded.metadata["client"] == "helpdesk"
    assert_projections_match_log(ctx.engine)


def test_invalidating_a_user_with_nothing_open_writes_nothing_and_says_so(
    ada: None, ctx: ServiceContext, browser: Browser
) -> None:
    page = signed_in(browser, ctx, "review", "admin")
    post(browser, page, "invalidate", reason=REASON)
    before = events(ctx)

    again = post(browser, page, "invalidate", reason="ticket 4712")

    assert again.headers["location"].endswith("done=nothing-open")
    assert "Nothing was open" in browser.get(again.headers["location"]).text
    assert events(ctx) == before


@pytest.mark.parametrize("action, fields, said", [
    ("invalidate", {"reason": ""}, "Not invalidated: a support action needs a reason"),
    ("invalidate", {"reason": f"asked by {ADA}"}, "Not invalidated: "),
    ("invalidate", {"reason": "x" * 600}, "Not invalidated: the reason is 600 characters long"),
    ("resend", {"flow": "reset", "reason": " "}, "Not sent: a support action needs a reason"),
    ("resend", {"flow": "sms", "reason": REASON}, "Not sent: the flow is &#39;reset&#39; or &#39;otp&#39;"),
    ("resend", {"flow": "otp", "purpose": "nonesuch", "reason": REASON}, "Not sent: "),
])
def test_bad_input_is_answered_on_the_case_page_and_nothing_is_written(
    ada: None, ctx: ServiceContext, browser: Browser, action: str, fields: dict[str, str], said: str
) -> None:
    page = signed_in(browser, ctx, "review", "admin")
    before = events(ctx)

    answer = post(browser, page, action, **fields)

    assert answer.status_code == 400 and 'role="alert"' in answer.text and said in answer.text, answer.text
    assert "<h1>User 42</h1>" in answer.text
    assert events(ctx) == before


def test_a_form_without_the_sessions_token_or_from_a_review_key_is_refused_and_writes_nothing(
    ada: None, ctx: ServiceContext, browser: Browser
) -> None:
    page = signed_in(browser, ctx, "review")
    assert 'action="/console/case/invalidate"' not in page.text and "need a key with the admin scope" in page.text
    before = events(ctx)

    forged = post(browser, page, "invalidate", reason=REASON)
    tokenless = browser.post("/console/case/resend", data={"user_id": "42", "flow": "reset", "reason": REASON},
                             follow_redirects=False)

    assert forged.status_code == 403 and "admin scope" in forged.text
    assert tokenless.status_code == 403
    assert events(ctx) == before


def test_an_admin_sends_a_fresh_code_and_the_case_page_says_support_sent_it(
    ada: None, ctx: ServiceContext, browser: Browser
) -> None:
    page = signed_in(browser, ctx, "review", "admin")

    done = post(browser, page, "resend", flow="otp", purpose="", reason=REASON)

    assert done.status_code == 303 and done.headers["location"].endswith("done=resent")
    after = browser.get(done.headers["location"])
    assert "Sent: a fresh link or code is queued" in after.text
    assert f"Support sent it on the user&#39;s behalf because {REASON}." in after.text
    assert "<td>OtpChallengeIssued</td>" in after.text


def test_a_user_without_a_case_is_not_found_and_nothing_is_written(ctx: ServiceContext, browser: Browser) -> None:
    page = signed_in(browser, ctx, "review", "admin")  # user 42 has no case: the search page, 404
    assert page.status_code == 404
    before = events(ctx)

    answer = browser.post("/console/case/resend", data={"csrf": csrf_of(page), "user_id": "nobody", "flow": "reset",
                                                        "reason": REASON}, follow_redirects=False)

    assert answer.status_code == 404 and "Nothing found." in answer.text
    assert events(ctx) == before
