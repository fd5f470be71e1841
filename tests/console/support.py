"""Helpers of the console tests: sign in through the forms, read a page's CSRF token, make real scoped keys."""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any
from uuid import UUID

import httpx

from domain.errors import CodeRejected
from domain.otp import RequestOtp
from domain.tenants import DEFAULT_TENANT
from infra.services.clients import create_client
from infra.services.otp import request_otp, verify_code
from infra.services.tenants import create_tenant, list_tenants
from infra.services.unit_of_work import ServiceContext
from tests.support.incidents import WEB, SmtpMailer, at, deliver_due, incident_context

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(page: httpx.Response) -> str:
    found = CSRF.search(page.text)
    assert found, page.text
    return found.group(1)


def sign_in(client: Any, api_key: str) -> httpx.Response:
    """Open the sign-in page and submit ``api_key`` with its token, as a browser would."""
    form = client.get("/console/sign-in")
    return client.post("/console/sign-in", data={"csrf": csrf_of(form), "api_key": api_key}, follow_redirects=False)


def key_of(ctx: ServiceContext, client: str, *scopes: str, tenant: str = DEFAULT_TENANT) -> str:
    """A real API key: a client of ``tenant`` (created first if need be) holding ``scopes``."""
    if tenant not in {t.name for t in list_tenants(ctx.engine)}:
        create_tenant(ctx, tenant)
    return create_client(ctx, client, tenant=tenant, scopes=scopes).api_key


class Browser:
    """A cookie-keeping client of an ASGI app or a transport, called synchronously (one event loop for its life)."""

    def __init__(self, app: Any, base_url: str = "http://authledger.test") -> None:
        self.loop = asyncio.new_event_loop()
        transport = app if isinstance(app, httpx.AsyncBaseTransport) else httpx.ASGITransport(app)
        self.client = httpx.AsyncClient(transport=transport, base_url=base_url)

    def request(self, method: str, path: str, **options: Any) -> httpx.Response:
        options.setdefault("follow_redirects", True)
        return self.loop.run_until_complete(self.client.request(method, path, **options))

    def get(self, path: str, **options: Any) -> httpx.Response:
        return self.request("GET", path, **options)

    def post(self, path: str, **options: Any) -> httpx.Response:
        return self.request("POST", path, **options)

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


# The three complaints of docs/incident-review.md, answered at the top of each user's case page (the
# summary's first lines), for the histories tests/support/incidents.py builds, read the next day.
TWO_EMAILS_ANSWERS = [  # user 42: asked twice, a worker stopped mid-send; the old link presented at 10:05
    ("Two emails?", "2 emails were accepted by the provider: …00000a01 at +1 s, …00000a03 at +3 min; …00000a03 "
                    "may have arrived twice: the lease of w1 expired mid-send and attempt 2 sent it again."),
    ("No email?", "The latest link's email …00000a03 was sent at +3 min through smtp on attempt 2."),
    ("Link or code not working?", "The link of request …00000a00 was refused at +5 min: it had been replaced by "
                                  "request …00000a02 at +2 min 11 s; the latest link, of request …00000a02, was not "
                                  "used: it expired at +32 min 11 s."),
]
NO_EMAIL_ANSWERS = [  # user 7: the provider refused every attempt until the worker gave up
    ("Two emails?", "No email was accepted by the provider."),
    ("No email?", "The latest link's email …00000b01 was not sent: abandoned at +5 min after 5 attempts "
                  "(provider busy (421))."),
    ("Link or code not working?", "No link or code was refused; the latest link, of request …00000b00, was not "
                                  "used: it expired at +30 min."),
]
STALE_LINK_ANSWERS = [  # user 9: the link of the first email was replaced by a newer request's
    ("Two emails?", "3 emails were accepted by the provider: …00000c01 at +2 s, …00000c03 at +5 min 1 s, "
                    "…00000c04 (password changed) at +8 min 1 s."),
    ("No email?", "The latest link's email …00000c03 was sent at +5 min 1 s through smtp."),
    ("Link or code not working?", "No link or code was refused; request …00000c00's link stopped working at "
                                  "+5 min, when request …00000c02 replaced it; the latest link, of request "
                                  "…00000c02, was used at +8 min."),
]


def a_code_entered_wrong_twice_then_right_and_again_hours_later(ctx: ServiceContext) -> UUID:
    """User 5's OTP challenge: two wrong codes and the right one in one second, the used code again at 13:00."""
    ctx, clock = incident_context(ctx, 0xE00)
    mailer = SmtpMailer()
    challenge = request_otp(ctx, RequestOtp("5", "di@example.test"), WEB)
    at(clock, "10:00:01")
    deliver_due(ctx, mailer, "w1")
    code = next(line for line in mailer.emails[-1].text_body.splitlines() if line.strip().isdigit()).strip()
    wrong = str((int(code) + 1) % 10 ** len(code)).zfill(len(code))
    at(clock, "10:00:30")
    for presented in (wrong, wrong, code):
        with contextlib.suppress(CodeRejected):
            verify_code(ctx, challenge.request_id, presented, WEB, user_id="5")
    at(clock, "13:00:00")
    with contextlib.suppress(CodeRejected):
        verify_code(ctx, challenge.request_id, code, WEB, user_id="5")
    return challenge.request_id
