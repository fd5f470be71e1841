"""The console's address search, outbox page (with an admin's re-drive) and audit page, through the ASGI stack."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta
from uuid import uuid4

import attrs
import httpx
import pytest
from sqlalchemy import text

from domain.delivery import DeliveryPolicy
from domain.reset import RequestReset
from infra.audit.seal import seal
from infra.clock import ManualClock
from infra.console.app import Console
from infra.delivery.worker import Worker
from infra.http.app import create_app
from infra.projector.catchup import catch_up
from infra.services.privacy import forget
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from infra.services.webhooks import add_endpoint
from tests.console.support import Browser, csrf_of, key_of, sign_in
from tests.support.keys import TEST_SIGNING_KEY
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log
from tests.support.webhook_receiver import running_receiver

# The real keys the tests sign in with: each client's tenant and scopes.
CLIENTS = {"support": ("default", ("review",)), "operator": ("default", ("review", "admin")),
           "acme": ("acme", ("review", "admin"))}
ADA = "ada@example.test"
SENDER = "authledger <no-reply@app.test>"


@pytest.fixture
def console(ctx: ServiceContext) -> Console:
    return Console(ctx, idle=timedelta(minutes=15), signing_key=lambda: TEST_SIGNING_KEY)


@pytest.fixture
def browser(ctx: ServiceContext, console: Console) -> Iterator[Browser]:
    client = Browser(create_app(ctx, console=console))
    yield client
    client.close()


def signed_in(browser: Browser, ctx: ServiceContext, client: str) -> Browser:
    tenant, scopes = CLIENTS[client]
    assert sign_in(browser, key_of(ctx, client, *scopes, tenant=tenant)).status_code == 303
    return browser


def search(browser: Browser, query: str) -> httpx.Response:
    page = browser.get("/console/")
    return browser.post("/console/search", data={"csrf": csrf_of(page), "q": query}, follow_redirects=False)


def abandoned_message(ctx: ServiceContext, user_id: str = "7", tenant: str = "default") -> str:
    """A reset email whose one allowed attempt failed: abandoned, its last error recorded."""
    capped = attrs.evolve(ctx, delivery_policy=DeliveryPolicy(max_attempts=1))
    outcome = request_reset(capped, RequestReset(user_id, f"user{user_id}@example.test", tenant=tenant))
    mailer = RecordingMailer()
    mailer.fail_next = 1
    assert Worker(capped, mailer, sender=SENDER).drain() == {"abandoned": 1}
    catch_up(ctx.engine)
    with ctx.engine.connect() as connection:
        return str(connection.execute(text("SELECT message_id FROM email_outbox WHERE request_id = :r"),
                                      {"r": outcome.request_id}).scalar_one())


def event_count(ctx: ServiceContext) -> int:
    with ctx.engine.connect() as connection:
        return connection.execute(text("SELECT count(*) FROM events")).scalar_one()


# -- address search -----------------------------------------------------------------------------

def test_an_address_search_lands_on_the_case_of_its_one_user_in_any_case(
    ctx: ServiceContext, browser: Browser
) -> None:
    request_reset(ctx, RequestReset("u1", ADA))
    signed_in(browser, ctx, "support")

    answer = search(browser, "  Ada@EXAMPLE.test ")

    assert answer.status_code == 303 and answer.headers["location"] == "/console/case?kind=user&id=u1"
    assert "User id, request id, message id or email address" in browser.get("/console/").text


def test_an_address_two_users_had_lists_both_to_choose_from(ctx: ServiceContext, browser: Browser) -> None:
    request_reset(ctx, RequestReset("u1", ADA))
    request_reset(ctx, RequestReset("u2", ADA))
    signed_in(browser, ctx, "support")

    answer = search(browser, ADA)

    assert answer.status_code == 200
    assert 'href="/console/case?kind=user&amp;id=u1"' in answer.text
    assert 'href="/console/case?kind=user&amp;id=u2"' in answer.text


def test_an_erased_user_another_tenants_user_and_a_non_address_are_not_found_by_address(
    ctx: ServiceContext, browser: Browser
) -> None:
    request_reset(ctx, RequestReset("u1", ADA))
    request_reset(ctx, RequestReset("u9", "grace@example.test", tenant="acme"))
    forget(ctx, "u1", reason="the user asked to be forgotten")
    signed_in(browser, ctx, "support")

    answers = [search(browser, q) for q in (ADA, "grace@example.test", "not@", "@")]

    assert {a.status_code for a in answers} == {200}
    assert all("Nothing found." in a.text for a in answers)
    assert all(ADA not in a.text and "grace@" not in a.text for a in answers), "the page never repeats the address"


# -- the outbox page ----------------------------------------------------------------------------

def test_the_outbox_page_draws_the_chart_and_lists_an_abandoned_message_with_its_last_error(
    ctx: ServiceContext, browser: Browser
) -> None:
    message = abandoned_message(ctx)
    signed_in(browser, ctx, "support")

    page = browser.get("/console/outbox")

    assert page.status_code == 200 and "<h1>Outbox</h1>" in page.text
    assert 'class="outbox-chart"' in page.text and 'data-state="abandoned" data-count="1"' in page.text
    assert f'<tr data-message="{message}" data-state="abandoned">' in page.text
    assert "provider busy" in page.text
    assert 'action="/console/outbox/redrive"' not in page.text, "a review session is offered no re-drive"


def row_of(page: httpx.Response, message: str) -> str:
    """The outbox list's row of one message, as HTML."""
    start = page.text.index(f'<tr data-message="{message}"')
    return page.text[start:page.text.index("</tr>", start)]


def test_an_admin_is_warned_before_re_driving_an_email_whose_request_a_newer_one_replaced(
    ctx: ServiceContext, browser: Browser
) -> None:
    replaced = abandoned_message(ctx, "7")
    still_wanted = abandoned_message(ctx, "8")
    ctx.clock.advance(timedelta(minutes=2))  # past the cooldown
    request_reset(ctx, RequestReset("7", "user7@example.test"))  # supersedes user 7's first request
    signed_in(browser, ctx, "operator")

    page = browser.get("/console/outbox")

    assert ("A re-drive would not send it: a newer request replaced its request, so the worker would skip it."
            in row_of(page, replaced))
    assert ">Re-drive anyway</button>" in row_of(page, replaced)
    assert "would not send it" not in row_of(page, still_wanted)
    assert ">Re-drive</button>" in row_of(page, still_wanted)


def test_a_review_session_is_warned_too_and_the_reason_is_read_as_the_worker_reads_it(
    ctx: ServiceContext, browser: Browser
) -> None:
    message = abandoned_message(ctx, "7")
    ctx.clock.advance(timedelta(hours=1))  # past the link's lifetime
    signed_in(browser, ctx, "support")

    page = browser.get("/console/outbox")

    assert "A re-drive would not send it: its link or code has expired" in row_of(page, message)


def test_the_outbox_lists_say_times_to_the_second_and_commands_apart_without_backticks(
    ctx: ServiceContext, browser: Browser
) -> None:
    ctx.clock.advance(timedelta(microseconds=123456))
    message = abandoned_message(ctx)
    signed_in(browser, ctx, "support")

    row = row_of(browser.get("/console/outbox"), message)

    assert "`" not in row
    assert re.search(r"Abandoned at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC after 1 attempt;", row), row
    assert ".123" not in row and "123456" not in row
    assert f'<code class="command">authledger outbox retry --message-id {message}</code>' in row


def test_a_review_session_that_posts_a_re_drive_anyway_is_refused_and_nothing_is_written(
    ctx: ServiceContext, browser: Browser
) -> None:
    message = abandoned_message(ctx)
    signed_in(browser, ctx, "support")
    csrf = csrf_of(browser.get("/console/outbox"))
    before = event_count(ctx)

    answer = browser.post("/console/outbox/redrive", data={"csrf": csrf, "message_id": message, "reason": "ticket 7"})

    assert answer.status_code == 403 and "admin scope" in answer.text
    assert event_count(ctx) == before


def test_an_admin_re_drives_an_abandoned_message_with_a_reason_recorded_with_its_client(
    ctx: ServiceContext, browser: Browser
) -> None:
    message = abandoned_message(ctx)
    signed_in(browser, ctx, "operator")
    page = browser.get("/console/outbox")
    assert 'action="/console/outbox/redrive"' in page.text and f'for="reason-{message}"' in page.text

    answer = browser.post("/console/outbox/redrive", data={"csrf": csrf_of(page), "message_id": message,
                                                           "reason": "provider recovered, ticket 7"},
                          follow_redirects=False)

    assert answer.status_code == 303 and answer.headers["location"] == "/console/outbox?done=redriven"
    assert "Re-driven" in browser.get(answer.headers["location"]).text
    with ctx.engine.connect() as connection:
        state = connection.execute(text("SELECT state FROM email_outbox WHERE message_id = :m"),
                                   {"m": message}).scalar_one()
        recorded = connection.execute(text(
            "SELECT payload, metadata FROM events WHERE event_type = 'DeliveryRedriven'")).one()
    assert state == "pending"
    assert recorded.payload["reason"] == "provider recovered, ticket 7"
    assert recorded.payload["actor"] == "client:operator"
    assert recorded.metadata["client"] == "operator"
    assert_projections_match_log(ctx.engine)


@pytest.mark.parametrize("form", [{"reason": ""}, {"reason": "   "}, {"reason": "mail ada@example.test"},
                                  {"message_id": "not-a-uuid"}, {"message_id": "00000000-0000-0000-0000-000000000007"}])
def test_a_re_drive_without_a_reason_or_of_no_such_message_is_refused_and_writes_nothing(
    ctx: ServiceContext, browser: Browser, form: dict[str, str]
) -> None:
    message = abandoned_message(ctx)
    signed_in(browser, ctx, "operator")
    csrf = csrf_of(browser.get("/console/outbox"))
    before = event_count(ctx)

    answer = browser.post("/console/outbox/redrive", data={"csrf": csrf, "message_id": message, "reason": "x", **form})

    assert answer.status_code in (400, 404) and 'role="alert"' in answer.text
    assert "ada@example.test" not in answer.text
    assert event_count(ctx) == before


def test_an_admin_of_another_tenant_neither_sees_nor_re_drives_the_message(
    ctx: ServiceContext, browser: Browser
) -> None:
    message = abandoned_message(ctx)
    signed_in(browser, ctx, "acme")
    page = browser.get("/console/outbox")
    before = event_count(ctx)

    answer = browser.post("/console/outbox/redrive", data={"csrf": csrf_of(page), "message_id": message,
                                                           "reason": "ticket 7"})

    assert message not in page.text
    assert answer.status_code == 404 and "No such message" in answer.text
    assert event_count(ctx) == before


def test_a_re_drive_without_its_csrf_token_is_refused(ctx: ServiceContext, browser: Browser) -> None:
    message = abandoned_message(ctx)
    signed_in(browser, ctx, "operator")
    before = event_count(ctx)
    answer = browser.post("/console/outbox/redrive", data={"csrf": "guess", "message_id": message, "reason": "x"})
    assert answer.status_code == 403 and event_count(ctx) == before


# -- the audit page -----------------------------------------------------------------------------

def test_the_audit_page_says_nothing_is_sealed_and_offers_no_digest(ctx: ServiceContext, browser: Browser) -> None:
    request_reset(ctx, RequestReset("u1", ADA))
    signed_in(browser, ctx, "support")

    page = browser.get("/console/audit")
    digest = browser.get("/console/audit/digest.json")

    assert page.status_code == 200 and "Nothing is sealed yet" in page.text
    assert digest.status_code == 409 and "No digest" in digest.text


def test_a_verification_started_from_the_audit_page_runs_in_the_background_to_intact(
    ctx: ServiceContext, console: Console, browser: Browser, clock: ManualClock
) -> None:
    request_reset(ctx, RequestReset("u1", ADA))
    seal(ctx.engine)
    signed_in(browser, ctx, "support")
    page = browser.get("/console/audit")
    assert "The log was last sealed at" in page.text
    assert json.loads(browser.get("/console/audit/verification.json").text) == {"state": "none"}

    started = browser.post("/console/audit/verify", data={"csrf": csrf_of(page)}, follow_redirects=False)
    console.verification.wait(30)

    assert started.status_code == 303 and started.headers["location"] == "/console/audit"
    status = json.loads(browser.get("/console/audit/verification.json").text)
    assert (status["state"], status["outcome"], status["checked"]) == ("ok", "intact", status["total"])
    assert status["total"] > 0
    assert '<strong class="outcome">intact</strong>' in browser.get("/console/audit").text


def test_starting_a_verification_needs_the_csrf_token(ctx: ServiceContext, console: Console, browser: Browser) -> None:
    signed_in(browser, ctx, "support")
    assert browser.post("/console/audit/verify", data={"csrf": "guess"}).status_code == 403
    assert console.verification.status() is None


def test_the_digest_download_is_signed_json_of_the_chain_head(ctx: ServiceContext, browser: Browser) -> None:
    request_reset(ctx, RequestReset("u1", ADA))
    seal(ctx.engine)
    signed_in(browser, ctx, "support")

    download = browser.get("/console/audit/digest.json")

    assert download.status_code == 200 and "attachment" in download.headers["content-disposition"]
    document = json.loads(download.text)
    assert document["chain_index"] >= 1 and document["signature"]


def test_signed_out_the_verification_status_is_refused(browser: Browser) -> None:
    assert browser.get("/console/audit/verification.json").status_code == 401
    assert browser.get("/console/outbox", follow_redirects=False).headers["location"] == "/console/sign-in"


def test_a_webhook_delivery_given_up_is_listed_and_its_case_tells_each_attempt_to_its_tenant_only(
    ctx: ServiceContext, browser: Browser
) -> None:
    with running_receiver() as receiver:
        add_endpoint(ctx, "default", receiver.url, ["email.accepted"])
        receiver.status = 500
        capped = attrs.evolve(ctx, delivery_policy=DeliveryPolicy(max_attempts=1))
        request_reset(capped, RequestReset("u1", ADA))
        Worker(capped, RecordingMailer(), sender=SENDER).drain()
    catch_up(ctx.engine)
    with ctx.engine.connect() as connection:
        delivery = str(connection.execute(text("SELECT message_id FROM email_outbox WHERE flow = 'webhook'"))
                       .scalar_one())
    signed_in(browser, ctx, "operator")

    assert delivery in browser.get("/console/outbox").text
    case = browser.get(f"/console/case?kind=message&id={delivery}")
    assert case.status_code == 200, case.text
    assert "Attempt 1 failed: webhook endpoint answered 500; no retry." in case.text


def test_another_tenants_webhook_delivery_is_not_found(ctx: ServiceContext, browser: Browser) -> None:
    with running_receiver() as receiver:
        add_endpoint(ctx, "default", receiver.url, ["email.accepted"])
        request_reset(ctx, RequestReset("u1", ADA))
        Worker(ctx, RecordingMailer(), sender=SENDER).drain()
    with ctx.engine.connect() as connection:
        delivery = str(connection.execute(text("SELECT message_id FROM email_outbox WHERE flow = 'webhook'"))
                       .scalar_one())
    signed_in(browser, ctx, "acme")

    theirs, nobodys = (browser.get(f"/console/case?kind=message&id={one}") for one in (delivery, str(uuid4())))

    assert theirs.status_code == nobodys.status_code == 404
    assert "Attempt" not in theirs.text
