"""SendGrid's signed Event Webhook: delivered, bounce, dropped, spam reports, verified by ECDSA.

SendGrid posts a JSON array of events. With "Signed Event Webhook Requests"
on, it signs the timestamp header's value followed by the raw body with
ECDSA over P-256 and SHA-256, and sends the base64 DER signature in
``X-Twilio-Email-Event-Webhook-Signature`` and the timestamp in
``X-Twilio-Email-Event-Webhook-Timestamp``. The account's verification key,
base64 DER (SubjectPublicKeyInfo) as the dashboard shows it, is configured
as ``AUTHLEDGER_SENDGRID_WEBHOOK_PUBLIC_KEY``. ``cryptography`` does the
verification (already a dependency, for the data keys).

An event names its email by ``sg_message_id``, whose part before
".filter" is the ``X-Message-Id`` the send API answered; an
``authledger_message_id`` custom argument, when the sender set one, is
authledger's own id and wins. Event kinds: "delivered"; "bounce" (type
"bounce" is permanent, "blocked" transient) and "dropped" (SendGrid will not
send to the address: permanent); "spamreport". Others (processed, deferred,
open, click, ...) are no feedback on delivery and are skipped.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any
from uuid import UUID

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from domain.errors import ConfigError, InvalidInput
from domain.feedback import Feedback, check_feedback
from infra.config.values import ecdsa_p256_public_key
from infra.errors import Unauthorized
from infra.services.feedback import MessageRef

SIGNATURE_HEADER = "X-Twilio-Email-Event-Webhook-Signature"
TIMESTAMP_HEADER = "X-Twilio-Email-Event-Webhook-Timestamp"
MAX_EVENTS = 1000  # SendGrid batches; a post larger than this is no SendGrid post


def load_public_key(text: str) -> ec.EllipticCurvePublicKey:
    """The verification key from its base64 DER text; ``ConfigError`` for anything but a P-256 key."""
    try:
        key: ec.EllipticCurvePublicKey = ecdsa_p256_public_key(text)
    except ValueError as error:
        raise ConfigError(f"AUTHLEDGER_SENDGRID_WEBHOOK_PUBLIC_KEY {error}") from None
    return key


def verify_signature(key: ec.EllipticCurvePublicKey, body: bytes, signature: str | None,
                     timestamp: str | None) -> None:
    """``Unauthorized`` unless ``signature`` is SendGrid's over ``timestamp`` + ``body`` under ``key``."""
    if not signature or not timestamp:
        raise Unauthorized(f"a SendGrid webhook post carries {SIGNATURE_HEADER} and {TIMESTAMP_HEADER}")
    try:
        key.verify(base64.b64decode(signature, validate=True), timestamp.encode("utf-8") + body,
                   ec.ECDSA(hashes.SHA256()))
    except (binascii.Error, ValueError, InvalidSignature):
        raise Unauthorized("the SendGrid webhook's signature does not verify") from None


def _ref(event: dict[str, Any]) -> MessageRef:
    own = event.get("authledger_message_id")
    if isinstance(own, str):
        try:
            return MessageRef(message_id=UUID(own))
        except ValueError:
            pass
    given = event.get("sg_message_id")
    if not isinstance(given, str) or not given:
        raise InvalidInput("each SendGrid event needs an sg_message_id")
    return MessageRef(provider_message_id=given.split(".filter", 1)[0])


def _feedback(event: dict[str, Any]) -> Feedback | None:
    kind = event.get("event")
    reason = event.get("reason") if isinstance(event.get("reason"), str) else ""
    status = event.get("status") if isinstance(event.get("status"), str) else ""
    diagnostic = " ".join(part for part in (status, reason) if part)[:1000]
    if kind == "delivered":
        return check_feedback("delivered", "sendgrid")
    if kind == "spamreport":
        return check_feedback("complaint", "sendgrid")
    if kind == "bounce":
        return check_feedback("bounce", "sendgrid", permanent=event.get("type", "bounce") != "blocked",
                              diagnostic=diagnostic)
    if kind == "dropped":
        return check_feedback("bounce", "sendgrid", permanent=True, diagnostic=f"dropped: {diagnostic}".strip())
    return None


def sendgrid_feedback(body: Any) -> list[tuple[MessageRef, Feedback]]:
    """The reports in a verified post, in its order; events that are no feedback are left out.

    ``InvalidInput`` for a body that is not an array of SendGrid events.
    """
    if not isinstance(body, list) or len(body) > MAX_EVENTS or not all(isinstance(e, dict) for e in body):
        raise InvalidInput(f"a SendGrid webhook post is an array of at most {MAX_EVENTS} event objects")
    found = []
    for event in body:
        feedback = _feedback(event)
        if feedback is not None:
            found.append((_ref(event), feedback))
    return found
