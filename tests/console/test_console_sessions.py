"""Console sessions live in PostgreSQL, so every `serve --processes N` process knows every session.

Two ``create_app`` instances on one database, each with its own ``Console``
and its own engine, stand for two server processes behind one socket; one
browser (one cookie jar) sends each request to whichever it is told.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, text

from domain.tokens import hash_token
from infra.clock import ManualClock
from infra.console.app import Console
from infra.console.sessions import COOKIE
from infra.db.engine import Database
from infra.http.app import create_app
from infra.services.clients import revoke_client
from infra.services.unit_of_work import ServiceContext
from tests.console.support import Browser, csrf_of, key_of, sign_in
from tests.support.dumps import dump
from tests.support.incidents import duplicate_emails


class Switch(httpx.AsyncBaseTransport):
    """A transport that hands each request to the app ``to`` names, as a shared socket hands it to a process."""

    def __init__(self, apps: dict[str, Any]) -> None:
        self.transports = {name: httpx.ASGITransport(app) for name, app in apps.items()}
        self.to = next(iter(apps))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.transports[self.to].handle_async_request(request)


class TwoProcesses(Browser):
    """One browser in front of two apps; ``via("a")`` / ``via("b")`` picks the one that answers next."""

    def __init__(self, apps: dict[str, Any]) -> None:
        self.switch = Switch(apps)
        super().__init__(self.switch)

    def via(self, name: str) -> TwoProcesses:
        self.switch.to = name
        return self


@pytest.fixture
def other_engine(database: Database) -> Iterator[Engine]:
    """The second process's own connections to the same database."""
    engine = database.engine(pool_size=2)
    yield engine
    engine.dispose()


@pytest.fixture
def browser(ctx: ServiceContext, other_engine: Engine) -> Iterator[TwoProcesses]:
    other = ServiceContext(engine=other_engine, keys=ctx.keys, clock=ctx.clock, reset_url=ctx.reset_url)
    client = TwoProcesses({"a": create_app(ctx, console=Console(ctx, idle=timedelta(minutes=15))),
                           "b": create_app(other, console=Console(other, idle=timedelta(minutes=15)))})
    yield client
    client.close()


@pytest.fixture
def review_key(ctx: ServiceContext) -> str:
    return key_of(ctx, "support", "review")


def rows(engine: Engine) -> list[Any]:
    with engine.connect() as connection:
        return connection.execute(text("SELECT * FROM console_sessions ORDER BY created_at")).all()


def test_a_session_opened_in_one_process_serves_pages_and_checked_forms_in_the_other(
    ctx: ServiceContext, browser: TwoProcesses, review_key: str
) -> None:
    duplicate_emails(ctx, ctx.engine)
    assert sign_in(browser.via("a"), review_key).status_code == 303

    page = browser.via("b").get("/console/", follow_redirects=False)
    found = browser.via("b").post("/console/search", data={"csrf": csrf_of(page), "q": "42"}, follow_redirects=False)
    forged = browser.via("a").post("/console/search", data={"csrf": "guess", "q": "42"})

    assert page.status_code == 200 and "client support" in page.text
    assert found.status_code == 303 and found.headers["location"] == "/console/case?kind=user&id=42"
    assert forged.status_code == 403 and "Reload the page" in forged.text
    assert csrf_of(browser.via("a").get("/console/")) == csrf_of(page), "one session, one token, in both"


def test_signing_out_in_one_process_ends_the_session_in_both(browser: TwoProcesses, review_key: str) -> None:
    sign_in(browser.via("a"), review_key)
    cookie = browser.client.cookies[COOKIE]
    page = browser.via("a").get("/console/")

    out = browser.via("b").post("/console/sign-out", data={"csrf": csrf_of(page)}, follow_redirects=False)
    browser.client.cookies.set(COOKIE, cookie, path="/console")  # a copy of the cookie kept from before

    assert out.headers["location"] == "/console/sign-in?ended=signed-out"
    for process in ("a", "b"):
        assert browser.via(process).get("/console/", follow_redirects=False).headers["location"] == "/console/sign-in"


def test_revoking_the_key_ends_the_session_in_every_process(
    ctx: ServiceContext, browser: TwoProcesses, review_key: str, engine: Engine
) -> None:
    sign_in(browser.via("a"), review_key)
    revoke_client(ctx, "support")

    answer = browser.via("b").get("/console/", follow_redirects=False)

    assert answer.headers["location"] == "/console/sign-in?ended=revoked"
    assert rows(engine) == [], "the revoked key's session is gone"


def test_an_idle_session_ends_in_every_process_and_its_row_is_deleted(
    browser: TwoProcesses, review_key: str, clock: ManualClock, engine: Engine
) -> None:
    sign_in(browser.via("a"), review_key)
    clock.advance(14 * 60)
    assert browser.via("b").get("/console/", follow_redirects=False).status_code == 200, "b restarts the wait"
    clock.advance(14 * 60)
    assert browser.via("a").get("/console/", follow_redirects=False).status_code == 200, "for a too"
    clock.advance(15 * 60 + 1)

    answer = browser.via("b").get("/console/", follow_redirects=False)

    assert answer.headers["location"] == "/console/sign-in?ended=idle"
    assert rows(engine) == []


def test_last_seen_is_written_at_most_once_a_minute(
    browser: TwoProcesses, review_key: str, clock: ManualClock, engine: Engine
) -> None:
    sign_in(browser.via("a"), review_key)
    [opened] = rows(engine)

    clock.advance(59)
    browser.via("b").get("/console/")
    [within_the_minute] = rows(engine)
    clock.advance(1)
    browser.via("a").get("/console/")
    [after_it] = rows(engine)

    assert within_the_minute.last_seen == opened.last_seen == opened.created_at
    assert after_it.last_seen == clock.now()


def test_signing_in_sweeps_away_sessions_that_went_idle_unseen(
    ctx: ServiceContext, browser: TwoProcesses, review_key: str, clock: ManualClock, engine: Engine
) -> None:
    sign_in(browser.via("a"), review_key)
    clock.advance(15 * 60 + 1)  # that browser never comes back
    later = Browser(browser.switch.transports["b"].app)  # another browser, another process
    try:
        sign_in(later, key_of(ctx, "other", "review"))
    finally:
        later.close()

    assert [row.created_at for row in rows(engine)] == [clock.now()], "only the new session is left"


def test_the_database_holds_neither_the_key_nor_the_cookie(
    browser: TwoProcesses, review_key: str, engine: Engine, database_url: str
) -> None:
    sign_in(browser.via("a"), review_key)
    cookie = browser.client.cookies[COOKIE]
    browser.via("b").get("/console/")

    whole = dump(database_url)

    assert review_key not in whole and cookie not in whole
    assert len(rows(engine)) == 1 and hash_token(cookie) in whole, "the session's row is in the dump, by digest"


@pytest.mark.parametrize("cookie", ["made-up", "x" * 4000, "%00' OR 1=1 --"])
def test_a_made_up_cookie_is_not_signed_in_and_writes_nothing(
    browser: TwoProcesses, engine: Engine, cookie: str
) -> None:
    browser.client.cookies.set(COOKIE, cookie, path="/console")

    answer = browser.via("b").get("/console/", follow_redirects=False)

    assert answer.status_code == 303 and answer.headers["location"] == "/console/sign-in"
    assert rows(engine) == []
