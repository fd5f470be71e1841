"""A tenant's rules and branding at work on real PostgreSQL: its requests and emails, the others' untouched.

acme sets an eight-digit code, a ten-minute link, a German default locale with
its own German subject, and its product name; the default tenant sets nothing
and keeps the deployment's rules and words. The worker renders each email with
the settings of its own tenant read at send time, and records their version.
"""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

from sqlalchemy import Engine

from domain.email import ProviderAccepted, email_stream
from domain.otp import RequestOtp
from domain.reset import RequestReset
from domain.tenants import TemplateOverride
from infra.clock import ManualClock
from infra.delivery.worker import Worker
from infra.services.otp import request_otp
from infra.services.reset import request_reset
from infra.services.tenants import configure_tenant, create_tenant
from infra.services.unit_of_work import ServiceContext
from tests.support.log_reading import stream_events
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log

SENDER = "authledger <no-reply@app.test>"
GERMAN_SUBJECT = TemplateOverride("de", "otp_code.subject", "Ihr $product_name-Code")


def deliver(ctx: ServiceContext) -> RecordingMailer:
    mailer = RecordingMailer()
    Worker(ctx, mailer, sender=SENDER).drain()
    return mailer


def test_a_tenants_rules_decide_its_new_requests_and_its_settings_render_its_emails(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    create_tenant(ctx, "acme")
    configure_tenant(ctx, "acme", actor="cli:ops", reason="OPS-1", changes={
        "otp_digits": 8, "reset_ttl": 600, "default_locale": "de", "templates": (GERMAN_SUBJECT,),
        "product_name": "Acme Books"})

    acme_reset = request_reset(ctx, RequestReset("42", "ada@acme.example", tenant="acme"))
    request_otp(ctx, RequestOtp("42", "ada@acme.example", tenant="acme"))
    default_reset = request_reset(ctx, RequestReset("42", "bob@example.test"))
    request_otp(ctx, RequestOtp("42", "bob@example.test"))

    assert acme_reset.expires_at - clock.now() == timedelta(minutes=10)
    assert default_reset.expires_at - clock.now() == ctx.reset_policy.ttl
    mailer = deliver(ctx)
    [acme_code] = [e for e in mailer.sent_to("ada@acme.example") if e.subject == "Ihr Acme Books-Code"]
    [bob_code] = [e for e in mailer.sent_to("bob@example.test") if e.subject == "Your sign-in code"]
    assert any(len(line.strip()) == 8 and line.strip().isdigit() for line in acme_code.text_body.splitlines())
    assert any(len(line.strip()) == 6 and line.strip().isdigit() for line in bob_code.text_body.splitlines())
    assert {e.sender for e in mailer.emails} == {SENDER}, "no tenant set a sender: the deployment's"

    def rendered_with(message_id: UUID) -> list[int | None]:
        return [e.settings_version for e in stream_events(engine, email_stream(message_id))
                if isinstance(e, ProviderAccepted)]

    assert rendered_with(acme_reset.message_id) == [1] and rendered_with(default_reset.message_id) == [0]
    assert_projections_match_log(engine)
