"""Nothing a caller writes reaches an email: a code is asked for a purpose its tenant declared, and the email
names the code by the declared display text.

Purposes are declared per tenant (``tenants configure NAME --purpose
NAME=TEXT``); a tenant that declares none allows the deployment's. An
undeclared purpose is refused before anything is written.
"""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import Engine

from domain.tenants import Purpose
from infra.delivery.worker import Worker
from infra.services.clients import create_client
from infra.services.tenants import configure_tenant, create_tenant
from infra.services.unit_of_work import ServiceContext
from tests.http.support import asgi_client, assert_problem, log_size
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log

pytestmark = pytest.mark.anyio
ADA = "ada@example.test"
ACME_PURPOSES = (Purpose("checkout", "payment approval code"), Purpose("wire_transfer", "transfer confirmation code"))


@pytest.fixture
def acme(ctx: ServiceContext) -> str:
    """The send key of tenant acme, which declares two purposes of its own."""
    create_tenant(ctx, "acme")
    configure_tenant(ctx, "acme", changes={"purposes": ACME_PURPOSES}, actor="cli:ops", reason="ticket OPS-7")
    return create_client(ctx, "acme-app", tenant="acme", scopes=["send"]).api_key


async def create(api: httpx.AsyncClient, purpose: str | None, key: str = "k", user_id: str = "42") -> httpx.Response:
    body = {"user_id": user_id, "email": ADA, **({"purpose": purpose} if purpose else {})}
    return await api.post("/v1/otp/challenges", json=body, headers={"Idempotency-Key": key})


def delivered(ctx: ServiceContext) -> RecordingMailer:
    mailer = RecordingMailer()
    Worker(ctx, mailer, sender="authledger <no-reply@app.test>").drain()
    return mailer


async def test_a_declared_purpose_sends_an_email_naming_the_code_by_its_display_text_not_its_name(
    ctx: ServiceContext, engine: Engine, acme: str
) -> None:
    async with asgi_client(ctx, acme) as api:
        for user_id, purpose in (("42", "checkout"), ("43", "wire_transfer")):
            assert (await create(api, purpose, user_id=user_id)).status_code == 202

    emails = sorted(delivered(ctx).emails, key=lambda email: email.subject)
    assert [email.subject for email in emails] == ["Your payment approval code", "Your transfer confirmation code"]
    assert "Here is your payment approval code:" in emails[0].text_body
    assert "Here is your payment approval code:" in emails[0].html_body
    for email in emails:
        assert "checkout" not in email.subject + email.text_body + email.html_body
        assert "wire_transfer" not in email.subject + email.text_body + email.html_body
    assert_projections_match_log(engine)


@pytest.mark.parametrize("purpose", [None, "login", "password_reset", "Checkout"],
                         ids=["default-login", "deployments-login", "never-declared", "other-case"])
async def test_an_undeclared_purpose_is_refused_and_writes_nothing(
    ctx: ServiceContext, engine: Engine, acme: str, purpose: str | None
) -> None:
    written = log_size(engine)
    async with asgi_client(ctx, acme) as api:
        response = await create(api, purpose)

    problem = assert_problem(response, 400, "purpose-unknown")
    assert problem["detail"] == (f"purpose {purpose or 'login'!r} is not declared for tenant 'acme'; it allows "
                                 "checkout, wire_transfer (`authledger tenants show acme`)")
    assert log_size(engine) == written
    assert delivered(ctx).emails == []


async def test_a_tenant_that_declares_none_allows_the_deployments_purposes(
    api: httpx.AsyncClient, ctx: ServiceContext, engine: Engine, acme: str
) -> None:
    assert (await create(api, "mfa", key="a")).status_code == 202, "the default tenant declared nothing"
    written = log_size(engine)
    assert_problem(await create(api, "checkout", key="b"), 400, "purpose-unknown")
    assert log_size(engine) == written, "another tenant's purpose is not the default tenant's"

    [email] = delivered(ctx).emails
    assert email.subject == "Your two-step verification code"


async def test_a_purpose_withdrawn_before_the_send_still_sends_the_code_under_a_neutral_name(
    ctx: ServiceContext, acme: str
) -> None:
    async with asgi_client(ctx, acme) as api:
        assert (await create(api, "checkout")).status_code == 202
    configure_tenant(ctx, "acme", changes={"purposes": ACME_PURPOSES[1:]}, actor="cli:ops", reason="ticket OPS-8")

    [email] = delivered(ctx).emails
    assert email.subject == "Your one-time code" and "checkout" not in email.text_body
