"""Provider feedback over HTTP: the generic endpoint, and Postmark's and SendGrid's own webhooks.

``POST /v1/providers/generic/events`` is for an API key with the
``provider-events`` scope, within its tenant: any relay or provider the
application can translate for. The vendor routes take the provider's own
format and its own proof (Postmark's basic auth credentials, SendGrid's
ECDSA signature), configured for the whole deployment
(``ProviderWebhooks``): they find the email by the provider's id among every
tenant's mail. An unconfigured vendor route, or a post without its proof,
is answered 401 and reads nothing further. Every report goes to
``infra.services.feedback``.
"""

from __future__ import annotations

from typing import Any

from attrs import frozen
from cryptography.hazmat.primitives.asymmetric import ec
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from domain.clients import Caller
from domain.errors import NotFound
from domain.feedback import Feedback, check_feedback
from infra.errors import Unauthorized
from infra.feedback.postmark import check_basic_auth, postmark_feedback
from infra.config.settings import Settings
from infra.feedback.sendgrid import (
    SIGNATURE_HEADER, TIMESTAMP_HEADER, load_public_key, sendgrid_feedback, verify_signature,
)
from infra.http import schemas
from infra.http.admin import Steps
from infra.http.problems import safe_json
from infra.http.validation import canonical_uuid, parse_json, read_body
from infra.services.feedback import MessageRef, record_feedback
from infra.services.unit_of_work import ServiceContext

PROVIDER_EVENTS = "provider-events"
VENDOR_BODY_BYTES = 1 << 20  # a SendGrid batch is larger than an API call's body


@frozen
class ProviderWebhooks:
    """The deployment's proofs for the vendor webhooks; None leaves that route refusing every post."""

    postmark_auth: str | None = None  # "user:password", as in the webhook URL set at Postmark
    sendgrid_key: ec.EllipticCurvePublicKey | None = None  # the account's verification key


def provider_webhooks(settings: Settings) -> ProviderWebhooks:
    """The vendor webhooks' proofs, as configured (checked when the settings were read)."""
    key = settings.sendgrid_webhook_public_key
    return ProviderWebhooks(settings.postmark_webhook_auth, load_public_key(key) if key is not None else None)


def _json(data: Any, status_code: int = 200) -> Response:
    return Response(safe_json(data), status_code=status_code, media_type="application/json")


def _ref(body: dict[str, Any]) -> MessageRef:
    message_id = body.get("message_id")
    return MessageRef(message_id=canonical_uuid(message_id) if isinstance(message_id, str) else None,
                      provider_message_id=body.get("provider_message_id"))


def _record_all(ctx: ServiceContext, reports: list[tuple[MessageRef, Feedback]], metadata: dict[str, str],
                ignored: int) -> dict[str, int]:
    """Each report recorded on its own (one unknown email does not refuse the batch): the counts."""
    counts = {"recorded": 0, "repeated": 0, "unknown": 0, "ignored": ignored}
    for ref, feedback in reports:
        try:
            recorded = record_feedback(ctx, ref, feedback, metadata, tenant=None)
        except NotFound:
            counts["unknown"] += 1
            continue
        counts["recorded" if recorded.recorded else "repeated"] += 1
    return counts


class ProviderEvents:
    """The feedback handlers, over the API's shared steps."""

    def __init__(self, api: Steps, webhooks: ProviderWebhooks) -> None:
        self.api, self.webhooks = api, webhooks

    async def generic(self, request: Request) -> Response:
        body, _ = await self.api._checked(request, schemas.PROVIDER_EVENT)
        ref = _ref(body)  # before any database work: exactly one of the two ids (400 otherwise)
        feedback = check_feedback(body["type"], "generic", permanent=body.get("permanent", False),
                                  diagnostic=body.get("diagnostic", ""))

        def work(caller: Caller) -> Any:
            return record_feedback(self.api.ctx, ref, feedback, self.api._metadata(request, caller),
                                   tenant=caller.tenant)

        recorded = await self.api._authenticated(request, PROVIDER_EVENTS, work)
        return _json(recorded.as_dict())

    async def postmark(self, request: Request) -> Response:
        if self.webhooks.postmark_auth is None:
            raise Unauthorized("the Postmark webhook is not configured here (AUTHLEDGER_POSTMARK_WEBHOOK_AUTH)")
        check_basic_auth(request.headers.get("authorization"), self.webhooks.postmark_auth)
        found = postmark_feedback(parse_json(await read_body(request, limit=VENDOR_BODY_BYTES)))
        reports = [found] if found is not None else []
        counts = await run_in_threadpool(_record_all, self.api.ctx, reports, _vendor_metadata(request, "postmark"),
                                         1 - len(reports))
        if counts["unknown"]:  # one post, one email: tell Postmark it named none of ours
            raise NotFound("no email with that id is known")
        return _json(counts)

    async def sendgrid(self, request: Request) -> Response:
        if self.webhooks.sendgrid_key is None:
            raise Unauthorized("the SendGrid webhook is not configured here (AUTHLEDGER_SENDGRID_WEBHOOK_PUBLIC_KEY)")
        raw = await read_body(request, limit=VENDOR_BODY_BYTES)
        verify_signature(self.webhooks.sendgrid_key, raw, request.headers.get(SIGNATURE_HEADER),
                         request.headers.get(TIMESTAMP_HEADER))
        body = parse_json(raw)
        reports = sendgrid_feedback(body)
        # A batch is answered 200 even when some of its events name no email of ours: an error would make
        # SendGrid post the whole batch again, and the known events are recorded already.
        counts = await run_in_threadpool(_record_all, self.api.ctx, reports, _vendor_metadata(request, "sendgrid"),
                                         len(body) - len(reports))
        return _json(counts)


def _vendor_metadata(request: Request, vendor: str) -> dict[str, str]:
    request_id = request.state.request_id
    return {"actor": f"provider:{vendor}", "request_id": request_id, "correlation_id": request_id}


def provider_routes(events: ProviderEvents) -> list[Route]:
    return [
        Route("/v1/providers/generic/events", events.generic, methods=["POST"]),
        Route("/v1/providers/postmark/events", events.postmark, methods=["POST"]),
        Route("/v1/providers/sendgrid/events", events.sendgrid, methods=["POST"]),
    ]
