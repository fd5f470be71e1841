"""Languages through the real server: a create names the reader's language, the Maildir holds the email in it.

The app runs under uvicorn on a real socket; the real worker renders from the
request's fresh state and writes RFC 5322 messages into a Maildir, whose
headers and bodies the tests read as a mail client would.
"""

from __future__ import annotations

import mailbox
from collections.abc import Iterator
from email import message_from_bytes
from email.message import EmailMessage
from email.policy import default as default_policy
from pathlib import Path
from uuid import uuid4

import httpx
import pytest
from sqlalchemy import text

from infra.delivery.providers.maildir import MaildirMailer
from infra.delivery.worker import Worker
from infra.http.app import create_app
from infra.services.clients import create_client
from infra.services.unit_of_work import ServiceContext
from tests.http.support import assert_problem, token_for
from tests.support.cli import Env, cli_outcome
from tests.support.replay import assert_projections_match_log
from tests.support.servers import served
from tests.support.two_tenants import events_digest

SENDER = "authledger <no-reply@app.test>"
ACCEPTED_LANGUAGES = text("SELECT payload->>'locale' FROM events WHERE event_type = 'ProviderAccepted' "
                          "ORDER BY global_position")


class Shop:
    """The API on a real socket with a ``send`` and ``verify`` key, and the Maildir its worker delivers to."""

    def __init__(self, ctx: ServiceContext, base: str, mail: Path) -> None:
        self.ctx, self.base, self.mail = ctx, base, mail
        self.key = create_client(ctx, "shop", scopes=["send", "verify"]).api_key

    def post(self, path: str, body: dict[str, object]) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.key}", "Idempotency-Key": str(uuid4())}
        return httpx.post(self.base + path, json=body, headers=headers, timeout=30)

    def created(self, path: str, body: dict[str, object]) -> dict[str, str]:
        response = self.post(path, body)
        assert response.status_code == 202, response.text
        answer: dict[str, str] = response.json()
        return answer

    def delivered(self, to: str) -> list[EmailMessage]:
        """Every email the worker has delivered to ``to`` by now."""
        Worker(self.ctx, MaildirMailer(self.mail, "bounces@app.test"), sender=SENDER).drain()
        box = mailbox.Maildir(self.mail, create=False)
        found = [message_from_bytes(box.get_bytes(key), policy=default_policy) for key in box.keys()]
        return [m for m in found if isinstance(m, EmailMessage) and m["To"] == to]


@pytest.fixture
def shop(ctx: ServiceContext, tmp_path: Path) -> Iterator[Shop]:
    with served(create_app(ctx)) as base:
        yield Shop(ctx, base, tmp_path / "mail")


def text_of(message: EmailMessage) -> str:
    body = message.get_body(("plain",))
    assert body is not None
    return str(body.get_content())


def test_a_reset_asked_in_german_is_sent_in_german_and_its_notice_too(shop: Shop, env: Env) -> None:
    created = shop.created("/v1/password-resets", {"user_id": "ada", "email": "ada@example.test", "locale": "de"})
    [link] = shop.delivered("ada@example.test")
    consumed = shop.post("/v1/password-resets/consume", {"token": token_for(shop.ctx.engine, created["request_id"])})
    assert consumed.status_code == 200, consumed.text
    [notice] = [m for m in shop.delivered("ada@example.test") if m["Message-ID"] != link["Message-ID"]]

    assert link["Content-Language"] == "de" and link["Subject"] == "Passwort zurücksetzen"
    assert "öffnen Sie vor" in text_of(link) and "token=" in text_of(link)
    assert notice["Content-Language"] == "de" and notice["Subject"] == "Ihr Passwort wurde geändert"
    with shop.ctx.engine.connect() as connection:
        assert connection.execute(ACCEPTED_LANGUAGES).scalars().all() == ["de", "de"]
    exit_code, history = cli_outcome(env, "history", "--user-id", "ada")
    assert exit_code == 0 and history.count(", written in de") == 2, history
    assert_projections_match_log(shop.ctx.engine)  # the language is in the snapshots and request rows too


@pytest.mark.parametrize(("asked", "written_in", "subject"), [
    ({"locale": "de"}, "de", "Ihr Code: sign-in code"),
    ({"locale": "de-AT"}, "de", "Ihr Code: sign-in code"),
    ({"locale": "DE-at"}, "de", "Ihr Code: sign-in code"),
    ({"locale": "fr"}, "en", "Your sign-in code"),
    ({}, "en", "Your sign-in code"),
])
def test_a_code_is_sent_in_the_best_match_of_the_language_asked_for(
    shop: Shop, asked: dict[str, str], written_in: str, subject: str
) -> None:
    shop.created("/v1/otp/challenges", {"user_id": "ada", "email": "ada@example.test", "purpose": "login", **asked})

    [email] = shop.delivered("ada@example.test")

    assert (email["Content-Language"], email["Subject"]) == (written_in, subject)


@pytest.mark.parametrize("path", ["/v1/password-resets", "/v1/otp/challenges"])
@pytest.mark.parametrize("garbage", ["deutsch_AT", "de-", "", "en-US-x", "de\nBcc: x", "de-" + "a" * 70, 49, None])
def test_a_locale_that_is_no_language_tag_is_a_400_and_writes_nothing(shop: Shop, path: str, garbage: object) -> None:
    before = events_digest(shop.ctx.engine)

    response = shop.post(path, {"user_id": "ada", "email": "ada@example.test", "locale": garbage})

    problem = assert_problem(response, 400, "invalid-body")
    assert [e["pointer"] for e in problem["errors"]] == ["/locale"]
    assert events_digest(shop.ctx.engine) == before


@pytest.mark.parametrize("flow", ["reset", "otp"])
def test_the_command_line_takes_a_locale_and_refuses_garbage_with_exit_2_writing_nothing(
    env: Env, ctx: ServiceContext, flow: str
) -> None:
    before = events_digest(ctx.engine)
    refused, said = cli_outcome(env, flow, "request", "--user-id", "ada", "--email", "ada@example.test",
                                "--locale", "de_AT")
    assert (refused, said.strip()) == (2, "Error: locale must be a BCP 47 language tag such as en, de or de-AT")
    assert events_digest(ctx.engine) == before

    accepted, _ = cli_outcome(env, flow, "request", "--user-id", "ada", "--email", "ada@example.test",
                              "--locale", "de-at")
    assert accepted == 0
    with ctx.engine.connect() as connection:
        stored = connection.execute(text("SELECT payload->>'locale' FROM events WHERE event_type IN "
                                         "('ResetRequested', 'OtpChallengeIssued')")).scalars().all()
    assert stored == ["de-AT"]
