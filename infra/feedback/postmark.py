"""Postmark's webhooks: bounce, spam complaint and delivery, authenticated by HTTP basic auth.

Postmark posts one JSON object per event, naming the email by the
``MessageID`` its send API answered (recorded as the provider's message id
with ``ProviderAccepted``). It signs nothing; a webhook URL may carry basic
auth credentials (``https://user:password@host/v1/providers/postmark/events``),
which Postmark then sends with every post, so the deployment configures a
pair (``AUTHLEDGER_POSTMARK_WEBHOOK_AUTH``) and every post must present it.

``RecordType`` says which webhook it is: "Bounce" (with a ``Type`` such as
"HardBounce", "SoftBounce", "Transient", "SpamComplaint"), "SpamComplaint"
or "Delivery". Types that are no failure to deliver ("AutoResponder",
"Subscribe", "Unsubscribe", "AddressChange", ...) are recognised and
recorded as nothing.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from typing import Any

from domain.errors import InvalidInput
from domain.feedback import Feedback, check_feedback
from infra.errors import Unauthorized
from infra.services.feedback import MessageRef

# Bounce types that say the address will never take mail: suppressed.
PERMANENT = frozenset({"HardBounce", "BadEmailAddress", "ManuallyDeactivated"})
# Bounce types that are no failure of this email to arrive: nothing to record.
NOT_A_FAILURE = frozenset({"AutoResponder", "Subscribe", "Unsubscribe", "AddressChange", "OpenRelayTest",
                           "ChallengeVerification", "InboundError"})


def check_basic_auth(header: str | None, expected: str) -> None:
    """``Unauthorized`` unless ``header`` is ``Basic`` with exactly the ``user:password`` configured."""
    scheme, _, encoded = (header or "").partition(" ")
    try:
        given = base64.b64decode(encoded.strip(), validate=True) if scheme.lower() == "basic" else b""
    except (binascii.Error, ValueError):
        given = b""
    if not given or not hmac.compare_digest(given, expected.encode("utf-8")):
        raise Unauthorized("the Postmark webhook's credentials are missing or wrong")


def postmark_feedback(body: Any) -> tuple[MessageRef, Feedback] | None:
    """What one Postmark webhook post reports, or None for an event that is no feedback on delivery.

    ``InvalidInput`` for a body that is not a Postmark event.
    """
    if not isinstance(body, dict) or not isinstance(body.get("MessageID"), str) or not body["MessageID"]:
        raise InvalidInput("a Postmark webhook post is an object with a MessageID")
    record, kind = body.get("RecordType"), body.get("Type")
    ref = MessageRef(provider_message_id=body["MessageID"])
    if record == "Delivery":
        return ref, check_feedback("delivered", "postmark")
    if record == "SpamComplaint" or (record == "Bounce" and kind == "SpamComplaint"):
        return ref, check_feedback("complaint", "postmark")
    if record != "Bounce" or not isinstance(kind, str):
        raise InvalidInput("RecordType must be Bounce, SpamComplaint or Delivery, and a bounce needs a Type")
    if kind in NOT_A_FAILURE:
        return None
    details = body.get("Details") if isinstance(body.get("Details"), str) else ""
    description = body.get("Description") if isinstance(body.get("Description"), str) else ""
    diagnostic = f"{kind}: {details or description}"[:1000]
    return ref, check_feedback("bounce", "postmark", permanent=kind in PERMANENT, diagnostic=diagnostic)
