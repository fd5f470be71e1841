"""Provider feedback over HTTP: the generic endpoint, Postmark's and SendGrid's webhooks, and lifting over HTTP.

The vendor posts are the fixtures in tests/fixtures/feedback, written from
each provider's documented examples, with the provider's message id of a
real email put in.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from infra.http.provider_events import ProviderWebhooks
from infra.services.clients import create_client
from infra.services.tenants import create_tenant
from infra.services.unit_of_work import ServiceContext
from tests.feedback.support import explained, sent_reset
from tests.http.support import assert_problem, asgi_client, log_size

pytestmark = pytest.mark.anyio

FIXTURES = Path(__file__).parent.parent / "fixtures" / "feedback"
POSTMARK_AUTH = "postmark:s3cret-pass"
SENDGRID_KEY = ec.generate_private_key(ec.SECP256R1())
CREATE = {"user_id": "7", "email": "ada@example.test"}


def fixture(name: str, provider_message_id: str) -> bytes:
    return (FIXTURES / name).read_text().replace("{provider_message_id}", provider_message_id).encode()


def basic(credentials: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(credentials.encode()).decode(),
            "Content-Type": "application/json"}


def signed(body: bytes, timestamp: str = "1764898440", key: ec.EllipticCurvePrivateKey = SENDGRID_KEY
           ) -> dict[str, str]:
    """The headers SendGrid sends: its ECDSA signature of the timestamp followed by the body."""
    signature = key.sign(timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
    return {"X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(signature).decode(),
            "X-Twilio-Email-Event-Webhook-Timestamp": timestamp, "Content-Type": "application/json"}


def webhooks() -> ProviderWebhooks:
    return ProviderWebhooks(POSTMARK_AUTH, SENDGRID_KEY.public_key())


def client(ctx: ServiceContext, name: str, *scopes: str, tenant: str = "default") -> httpx.AsyncClient:
    return asgi_client(ctx, create_client(ctx, name, tenant=tenant, scopes=scopes).api_key, webhooks=webhooks())


async def refused_as_suppressed(ctx: ServiceContext) -> None:
    async with client(ctx, f"shop{log_size(ctx.engine)}", "send") as shop:
        for path in ("/v1/password-resets", "/v1/otp/challenges"):
            answer = await shop.post(path, json=CREATE, headers={"Idempotency-Key": f"k-{path}"})
            assert_problem(answer, 422, "address-suppressed")


class TestGeneric:
    async def test_a_bounce_is_told_by_explain_suppresses_and_lifting_lets_the_create_through(
        self, ctx: ServiceContext,
    ) -> None:
        message_id = sent_reset(ctx, "42", "ada@example.test")
        async with client(ctx, "relay", "provider-events") as relay:
            answer = await relay.post("/v1/providers/generic/events", json={
                "message_id": str(message_id), "type": "bounce", "permanent": True,
                "diagnostic": "550 5.1.1 user unknown"})
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"message_id": str(message_id), "recorded": True, "suppressed": True}
        assert any("bounced for good" in s and "550 5.1.1 user unknown" in s for s in explained(ctx, message_id))
        await refused_as_suppressed(ctx)

        async with client(ctx, "ops", "admin", "send") as admin:
            listed = (await admin.get("/v1/admin/suppressions")).json()["suppressions"]
            lifted = await admin.post("/v1/admin/suppressions/lift", json={
                "email": "Ada@Example.test", "reason": "ticket 12: the user fixed their mailbox"})
            created = await admin.post("/v1/password-resets", json=CREATE, headers={"Idempotency-Key": "after"})
        assert [(s["user_id"], s["reason"], s["addresses"]) for s in listed] == [("42", "bounce", 1)]
        assert lifted.json() == {"lifted": 1}
        assert created.status_code == 202, created.text

    @pytest.mark.parametrize("body", [
        {"type": "bounce"},
        {"message_id": "0190a5c8-0000-7000-8000-000000000000", "provider_message_id": "x", "type": "bounce"},
        {"provider_message_id": "x", "type": "opened"},
        {"provider_message_id": "x", "type": "bounce", "permanent": "yes"},
        {"provider_message_id": "x", "type": "bounce", "diagnostic": "x" * 1001},
        {"provider_message_id": "id with spaces", "type": "bounce"},
        {"provider_message_id": "x", "type": "bounce", "surprise": 1},
    ])
    async def test_bad_input_is_400_and_writes_nothing(self, ctx: ServiceContext, body: dict[str, Any]) -> None:
        sent_reset(ctx, "42", "ada@example.test")
        async with client(ctx, "relay", "provider-events") as relay:
            size = log_size(ctx.engine)
            answer = await relay.post("/v1/providers/generic/events", json=body)
        assert answer.status_code == 400, answer.text
        assert log_size(ctx.engine) == size

    async def test_a_key_without_the_scope_is_403(self, ctx: ServiceContext) -> None:
        message_id = sent_reset(ctx, "42", "ada@example.test")
        async with client(ctx, "shop", "send", "review") as shop:
            answer = await shop.post("/v1/providers/generic/events",
                                     json={"message_id": str(message_id), "type": "complaint"})
        assert_problem(answer, 403, "forbidden")

    async def test_another_tenants_email_is_answered_as_an_unknown_one(self, ctx: ServiceContext) -> None:
        create_tenant(ctx, "acme")
        message_id = sent_reset(ctx, "42", "ada@example.test", tenant="acme")
        async with client(ctx, "relay", "provider-events") as relay:
            size = log_size(ctx.engine)
            theirs = await relay.post("/v1/providers/generic/events",
                                      json={"provider_message_id": f"rec-{message_id}", "type": "complaint"})
            nobodys = await relay.post("/v1/providers/generic/events",
                                       json={"provider_message_id": "rec-nothing", "type": "complaint"})
        assert assert_problem(theirs, 404, "not-found")["detail"] == assert_problem(nobodys, 404, "not-found")["detail"]
        assert log_size(ctx.engine) == size


class TestPostmark:
    async def test_a_hard_bounce_is_told_and_suppresses_and_its_retry_records_nothing(
        self, ctx: ServiceContext,
    ) -> None:
        message_id = sent_reset(ctx, "42", "ada@example.test")
        body = fixture("postmark_bounce.json", f"rec-{message_id}")
        async with asgi_client(ctx, None, webhooks=webhooks()) as postmark:
            first = await postmark.post("/v1/providers/postmark/events", content=body, headers=basic(POSTMARK_AUTH))
            size = log_size(ctx.engine)
            retried = await postmark.post("/v1/providers/postmark/events", content=body, headers=basic(POSTMARK_AUTH))
        assert first.json() == {"recorded": 1, "repeated": 0, "unknown": 0, "ignored": 0}
        assert retried.json()["repeated"] == 1 and log_size(ctx.engine) == size
        assert any("bounced for good" in s and "Postmark" in s and "HardBounce" in s
                   for s in explained(ctx, message_id))
        await refused_as_suppressed(ctx)

    async def test_a_spam_complaint_suppresses_and_a_delivery_does_not(self, ctx: ServiceContext) -> None:
        delivered, complained = sent_reset(ctx, "1", "bob@example.test"), sent_reset(ctx, "42", "ada@example.test")
        async with asgi_client(ctx, None, webhooks=webhooks()) as postmark:
            for name, message_id in (("postmark_delivery.json", delivered),
                                     ("postmark_spam_complaint.json", complained)):
                answer = await postmark.post("/v1/providers/postmark/events",
                                             content=fixture(name, f"rec-{message_id}"), headers=basic(POSTMARK_AUTH))
                assert answer.json()["recorded"] == 1
        assert any("marked it as spam" in s for s in explained(ctx, complained))
        assert any("was delivered to the recipient's mail server" in s for s in explained(ctx, delivered))
        await refused_as_suppressed(ctx)

    @pytest.mark.parametrize("headers", [basic("postmark:wrong"), {"Content-Type": "application/json"},
                                         {"Authorization": "Bearer x", "Content-Type": "application/json"}])
    async def test_wrong_or_missing_credentials_are_401_and_write_nothing(
        self, ctx: ServiceContext, headers: dict[str, str],
    ) -> None:
        message_id = sent_reset(ctx, "42", "ada@example.test")
        size = log_size(ctx.engine)
        async with asgi_client(ctx, None, webhooks=webhooks()) as postmark:
            answer = await postmark.post("/v1/providers/postmark/events",
                                         content=fixture("postmark_bounce.json", f"rec-{message_id}"), headers=headers)
        assert_problem(answer, 401, "unauthorized")
        assert log_size(ctx.engine) == size

    async def test_an_unconfigured_deployment_refuses_every_post(self, ctx: ServiceContext) -> None:
        message_id = sent_reset(ctx, "42", "ada@example.test")
        async with asgi_client(ctx, None) as postmark:
            answer = await postmark.post("/v1/providers/postmark/events", headers=basic(POSTMARK_AUTH),
                                         content=fixture("postmark_bounce.json", f"rec-{message_id}"))
        assert_problem(answer, 401, "unauthorized")


class TestSendgrid:
    async def test_a_signed_batch_records_the_bounce_and_counts_the_rest(self, ctx: ServiceContext) -> None:
        message_id = sent_reset(ctx, "42", "ada@example.test")
        body = fixture("sendgrid_events.json", f"rec-{message_id}")
        async with asgi_client(ctx, None, webhooks=webhooks()) as sendgrid:
            answer = await sendgrid.post("/v1/providers/sendgrid/events", content=body, headers=signed(body))
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"recorded": 1, "repeated": 0, "unknown": 1, "ignored": 1}
        assert any("bounced for good" in s and "SendGrid" in s and "500 unknown recipient" in s
                   for s in explained(ctx, message_id))
        await refused_as_suppressed(ctx)

    async def test_a_bad_signature_is_401_and_writes_nothing(self, ctx: ServiceContext) -> None:
        message_id = sent_reset(ctx, "42", "ada@example.test")
        body = fixture("sendgrid_events.json", f"rec-{message_id}")
        tampered = body.replace(b'"bounce"', b'"spamreport"', 1)
        size = log_size(ctx.engine)
        async with asgi_client(ctx, None, webhooks=webhooks()) as sendgrid:
            for content, headers in [
                (tampered, signed(body)),  # the body changed after signing
                (body, {**signed(body), "X-Twilio-Email-Event-Webhook-Timestamp": "1764898441"}),  # not the one signed
                (body, signed(body, key=ec.generate_private_key(ec.SECP256R1()))),  # another account's key
                (body, {"Content-Type": "application/json"}),  # not signed at all
            ]:
                answer = await sendgrid.post("/v1/providers/sendgrid/events", content=content, headers=headers)
                assert_problem(answer, 401, "unauthorized")
        assert log_size(ctx.engine) == size


def test_the_sendgrid_key_is_configured_as_sendgrid_shows_it() -> None:
    from infra.config.values import ecdsa_p256_public_key

    shown = base64.b64encode(SENDGRID_KEY.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)).decode()
    assert ecdsa_p256_public_key(shown).public_numbers() == SENDGRID_KEY.public_key().public_numbers()
    with pytest.raises(ValueError):
        ecdsa_p256_public_key(base64.b64encode(json.dumps({"not": "a key"}).encode()).decode())
