"""The case page's addresses and its admin erase form, through the whole ASGI stack with real scoped keys."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from uuid import UUID

import httpx
import pytest
from sqlalchemy import text

from infra.console.app import Console
from infra.http.app import create_app
from infra.services.unit_of_work import ServiceContext
from tests.console.support import Browser, csrf_of, key_of, sign_in
from tests.support.incidents import duplicate_emails
from tests.support.replay import assert_projections_match_log

ADA = "ada@example.test"  # user 42's address in the incident
ADDRESS_CELLS = re.compile(r'<td class="address">([^<]*)</td>')


@pytest.fixture
def browser(ctx: ServiceContext) -> Iterator[Browser]:
    client = Browser(create_app(ctx, console=Console(ctx, idle=timedelta(minutes=15))))
    yield client
    client.close()


@pytest.fixture
def incident(ctx: ServiceContext) -> dict[str, UUID]:
    return duplicate_emails(ctx, ctx.engine)


def as_admin(browser: Browser, ctx: ServiceContext) -> Browser:
    assert sign_in(browser, key_of(ctx, "operator", "review", "admin")).status_code == 303
    return browser


def as_reviewer(browser: Browser, ctx: ServiceContext) -> Browser:
    assert sign_in(browser, key_of(ctx, "support", "review")).status_code == 303
    return browser


def events(ctx: ServiceContext) -> int:
    with ctx.engine.connect() as connection:
        return connection.execute(text("SELECT count(*) FROM events")).scalar_one()


def addresses_on(page: httpx.Response) -> list[str]:
    return ADDRESS_CELLS.findall(page.text)


def erase(browser: Browser, page: httpx.Response, reason: str, **extra: str) -> httpx.Response:
    return browser.post("/console/case/erase", data={"csrf": csrf_of(page), "user_id": "42", "reason": reason,
                                                     **extra}, follow_redirects=False)


def test_the_event_list_shows_the_plain_address_never_ciphertext_or_a_placeholder(
    ctx: ServiceContext, browser: Browser, incident: dict[str, UUID]
) -> None:
    as_reviewer(browser, ctx)

    pages = [browser.get("/console/case?kind=user&id=42"),
             browser.get(f"/console/case?kind=request&id={incident['first_request']}"),
             browser.get(f"/console/case?kind=message&id={incident['second_message']}")]

    for page in pages:
        assert ADA in addresses_on(page)
        assert set(addresses_on(page)) <= {ADA, ""}
        assert "enc:v1:" not in page.text and "(sealed)" not in page.text


def test_a_review_session_is_offered_no_erase_form_and_a_forged_erase_is_refused_with_nothing_written(
    ctx: ServiceContext, browser: Browser, incident: dict[str, UUID]
) -> None:
    as_reviewer(browser, ctx)
    page = browser.get("/console/case?kind=user&id=42")
    before = events(ctx)

    for step in ({}, {"confirm": "yes"}):
        answer = erase(browser, page, "ticket 42", **step)
        assert answer.status_code == 403 and "admin scope" in answer.text

    assert 'action="/console/case/erase"' not in page.text
    assert events(ctx) == before


def test_an_admin_erases_a_user_after_confirming_and_the_case_then_reads_erased(
    ctx: ServiceContext, browser: Browser, incident: dict[str, UUID]
) -> None:
    as_admin(browser, ctx)
    page = browser.get("/console/case?kind=user&id=42")
    assert 'action="/console/case/erase"' in page.text and '<label for="erase-reason">' in page.text
    before = events(ctx)

    confirm = erase(browser, page, "  ticket 42: the user asked to be forgotten ")
    assert confirm.status_code == 200 and "<h1>Erase user 42?</h1>" in confirm.text
    assert 'name="confirm" value="yes"' in confirm.text and "ticket 42: the user asked to be forgotten" in confirm.text
    assert events(ctx) == before, "the first step only asks"

    done = browser.post("/console/case/erase", data=dict(re.findall(r'name="(\w+)" value="([^"]*)"', confirm.text)),
                        follow_redirects=False)

    assert done.status_code == 303 and done.headers["location"] == "/console/case?kind=user&id=42&done=erased"
    after = browser.get(done.headers["location"])
    assert "Erased: the user" in after.text
    assert set(addresses_on(after)) == {"[erased]", ""} and ADA not in after.text
    assert 'data-kind="erasure"' in after.text
    with ctx.engine.connect() as connection:
        erased = connection.execute(text(
            "SELECT stream_id, payload, metadata FROM events WHERE event_type = 'SubjectErased'")).one()
    assert erased.stream_id == "subject:42"
    assert erased.payload["reason"] == "ticket 42: the user asked to be forgotten"
    assert (erased.metadata["client"], erased.metadata["actor"]) == ("operator", "client:operator")
    assert_projections_match_log(ctx.engine)


def test_erasing_again_changes_nothing_and_says_so(
    ctx: ServiceContext, browser: Browser, incident: dict[str, UUID]
) -> None:
    as_admin(browser, ctx)
    page = browser.get("/console/case?kind=user&id=42")
    assert erase(browser, page, "ticket 42", confirm="yes").status_code == 303
    before = events(ctx)

    again = erase(browser, page, "ticket 43", confirm="yes")

    assert again.status_code == 200 and "Already erased at" in again.text and "nothing changed" in again.text
    assert events(ctx) == before


@pytest.mark.parametrize("form", [{"reason": ""}, {"reason": "   "}, {"reason": f"asked by {ADA}"},
                                  {"reason": "x" * 600}])
def test_an_erasure_without_a_fit_reason_is_refused_at_either_step_and_writes_nothing(
    ctx: ServiceContext, browser: Browser, incident: dict[str, UUID], form: dict[str, str]
) -> None:
    as_admin(browser, ctx)
    page = browser.get("/console/case?kind=user&id=42")
    before = events(ctx)

    for step in ({}, {"confirm": "yes"}):
        answer = browser.post("/console/case/erase", data={"csrf": csrf_of(page), "user_id": "42", **form, **step})
        assert answer.status_code == 400 and 'role="alert"' in answer.text and "Not erased" in answer.text
        assert f"asked by {ADA}" not in answer.text

    assert events(ctx) == before


@pytest.mark.parametrize("user_id", ["nobody", "", "4 2", "x" * 300])
def test_an_erasure_of_no_such_user_is_nothing_found_and_writes_nothing(
    ctx: ServiceContext, browser: Browser, incident: dict[str, UUID], user_id: str
) -> None:
    as_admin(browser, ctx)
    csrf = csrf_of(browser.get("/console/"))
    before = events(ctx)

    answer = browser.post("/console/case/erase", data={"csrf": csrf, "user_id": user_id, "reason": "ticket 42",
                                                       "confirm": "yes"})

    assert answer.status_code == 404 and "Nothing found." in answer.text
    assert events(ctx) == before


def test_another_tenants_admin_cannot_erase_the_user(
    ctx: ServiceContext, browser: Browser, incident: dict[str, UUID]
) -> None:
    sign_in(browser, key_of(ctx, "acme-ops", "review", "admin", tenant="acme"))
    csrf = csrf_of(browser.get("/console/"))
    before = events(ctx)

    answer = browser.post("/console/case/erase", data={"csrf": csrf, "user_id": "42", "reason": "ticket 42",
                                                       "confirm": "yes"})

    assert answer.status_code == 404 and "Nothing found." in answer.text
    assert events(ctx) == before
    with ctx.engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM subject_keys WHERE user_id = '42'")).scalar_one() > 0


def test_an_erase_without_its_csrf_token_is_refused(
    ctx: ServiceContext, browser: Browser, incident: dict[str, UUID]
) -> None:
    as_admin(browser, ctx)
    before = events(ctx)
    answer = browser.post("/console/case/erase", data={"csrf": "guess", "user_id": "42", "reason": "ticket 42",
                                                       "confirm": "yes"})
    assert answer.status_code == 403 and events(ctx) == before
