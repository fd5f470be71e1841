"""Webhooks to the application: its endpoints, which log events they hear of, and how each call is signed.

A tenant registers endpoints (``webhooks:<tenant>`` stream). Each holds a
secret that signs every call as the Standard Webhooks specification says:
``webhook-signature`` is ``v1,`` and the base64 HMAC-SHA256 of
``<webhook-id>.<webhook-timestamp>.<body>`` under the secret's bytes
(the secret is shown once as ``whsec_`` + base64). A rotation keeps the old
secret signing beside the new one for ``ROTATION_OVERLAP``, so the
application can move to the new one without missing a call.

A fact of the log that the application cares about becomes a webhook event
(``webhook_event_of``): its data carries ids (tenant, the application's own
user id, request, challenge or message id), never a token, a code or an
address. Each webhook event is one delivery per subscribed endpoint
(``WebhookQueued`` on ``webhook:<delivery id>``), delivered by the email
outbox's own leases, retries and breaker; the ``webhook-id`` derives from
the source event's id, so every retry and re-drive of it carries the same one
and receivers can drop repeats.

Pure: secrets arrive sealed (the infra seals and opens them), and time and ids
are passed in.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from uuid import UUID

import attrs
from attrs import evolve, frozen

from domain.errors import InvalidInput, NotFound, UnknownEventType
from domain.tenants import split_scoped_user

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 24  # the specification asks for 24 to 64 bytes
# After a rotation the old secret keeps signing beside the new one this long
# (docs/webhooks.md): time for the application to deploy the new secret.
ROTATION_OVERLAP = timedelta(hours=24)
# A webhook not delivered this long after its fact is abandoned: retries back
# off up to the outbox's cap (a minute) until then, so a receiver down for an
# hour, or a day, still gets everything once it is back.
DELIVERY_HORIZON = timedelta(days=3)
MAX_URL_LENGTH = 2000
# Every fact is one delivery per listening endpoint, written in the fact's own
# transaction: a tenant's endpoints are few, or each of its users' clicks
# would cost a write per endpoint.
MAX_ENDPOINTS = 10
WEBHOOK_FLOW = "webhook"  # the outbox row's flow: a webhook delivery, not an email

EVENT_TYPES = (
    "email.accepted", "email.failed", "email.abandoned", "email.bounced", "email.complained",
    "reset.consumed", "otp.verified", "user.erased", "user.invalidated",
)
ENDPOINT_ID = re.compile(r"ep_[0-9a-f]{32}")
_DELIVERY_NAMESPACE = UUID("6f1c8f0e-3a52-4d0e-9a41-5b1f0d2c7e11")


def endpoints_stream(tenant: str) -> str:
    return f"webhooks:{tenant}"


def webhook_stream(delivery_id: UUID) -> str:
    return f"webhook:{delivery_id}"


# -- endpoints -------------------------------------------------------------------


@frozen
class SealedSecret:
    """A secret as stored: AES-GCM under a master key, bound to its tenant, endpoint and secret id."""

    secret_id: str
    master_key_id: str
    sealed: str  # base64 of nonce + ciphertext; never the secret


@frozen
class WebhookEndpointAdded:
    endpoint_id: str
    tenant: str
    url: str
    event_types: tuple[str, ...]  # empty: every event type
    secret: SealedSecret
    added_at: datetime


@frozen
class WebhookSecretRotated:
    endpoint_id: str
    secret: SealedSecret
    rotated_at: datetime
    previous_until: datetime  # the old secret signs too until then


@frozen
class WebhookEndpointRemoved:
    endpoint_id: str
    removed_at: datetime


ENDPOINT_EVENTS = (WebhookEndpointAdded, WebhookSecretRotated, WebhookEndpointRemoved)


@frozen
class Endpoint:
    endpoint_id: str
    tenant: str
    url: str
    event_types: tuple[str, ...]
    secret: SealedSecret
    created_at: datetime
    previous: SealedSecret | None = None
    previous_until: datetime | None = None
    removed_at: datetime | None = None

    def hears(self, event_type: str) -> bool:
        return self.removed_at is None and (not self.event_types or event_type in self.event_types)

    def signing_secrets(self, now: datetime) -> list[SealedSecret]:
        """The secrets that sign a call made at ``now``: the newest, and the previous one during its overlap."""
        if self.previous is not None and self.previous_until is not None and now < self.previous_until:
            return [self.secret, self.previous]
        return [self.secret]


@frozen
class Endpoints:
    """A tenant's endpoints, by id, removed ones included (their ids are never reused)."""

    by_id: Mapping[str, Endpoint] = attrs.field(factory=dict)


def evolve_endpoint(endpoint: Endpoint | None, event: object) -> Endpoint | None:
    match event:
        case WebhookEndpointAdded():
            return Endpoint(event.endpoint_id, event.tenant, event.url, event.event_types, event.secret,
                            event.added_at)
        case WebhookSecretRotated() if endpoint is not None:
            return evolve(endpoint, secret=event.secret, previous=endpoint.secret,
                          previous_until=event.previous_until)
        case WebhookEndpointRemoved() if endpoint is not None:
            return evolve(endpoint, removed_at=event.removed_at)
    return endpoint


def fold_endpoints(events: Iterable[object]) -> Endpoints:
    by_id: dict[str, Endpoint] = {}
    for event in events:
        if not isinstance(event, ENDPOINT_EVENTS):
            raise UnknownEventType(f"{type(event).__name__} on a webhooks stream")
        folded = evolve_endpoint(by_id.get(event.endpoint_id), event)
        if folded is not None:
            by_id[event.endpoint_id] = folded
    return Endpoints(by_id)


def check_event_types(event_types: Iterable[str]) -> tuple[str, ...]:
    """The types in ``EVENT_TYPES`` order, each once; ``InvalidInput`` naming any unknown one."""
    given = list(event_types)
    unknown = [name for name in given if name not in EVENT_TYPES]
    if unknown:
        raise InvalidInput(f"unknown webhook event type {unknown[0]!r}; known: {', '.join(EVENT_TYPES)}")
    return tuple(name for name in EVENT_TYPES if name in given)


def check_endpoint_id(endpoint_id: object) -> str:
    if not isinstance(endpoint_id, str) or not ENDPOINT_ID.fullmatch(endpoint_id):
        raise InvalidInput("an endpoint id is ep_ and 32 hex digits, as `webhooks list` shows it")
    return endpoint_id


def decide_add(state: Endpoints, *, endpoint_id: str, tenant: str, url: str, event_types: tuple[str, ...],
               secret: SealedSecret, now: datetime) -> list[object]:
    if endpoint_id in state.by_id:
        raise InvalidInput(f"endpoint {endpoint_id} exists already")
    if sum(1 for endpoint in state.by_id.values() if endpoint.removed_at is None) >= MAX_ENDPOINTS:
        raise InvalidInput(f"a tenant has at most {MAX_ENDPOINTS} webhook endpoints; remove one first")
    return [WebhookEndpointAdded(endpoint_id, tenant, url, event_types, secret, now)]


def _live(state: Endpoints, endpoint_id: str) -> Endpoint:
    endpoint = state.by_id.get(endpoint_id)
    if endpoint is None or endpoint.removed_at is not None:
        raise NotFound(f"no webhook endpoint {endpoint_id} in this tenant")
    return endpoint


def decide_rotate(state: Endpoints, endpoint_id: str, *, secret: SealedSecret, now: datetime) -> list[object]:
    _live(state, endpoint_id)
    return [WebhookSecretRotated(endpoint_id, secret, now, now + ROTATION_OVERLAP)]


def decide_remove(state: Endpoints, endpoint_id: str, *, now: datetime) -> list[object]:
    _live(state, endpoint_id)
    return [WebhookEndpointRemoved(endpoint_id, now)]


# -- deliveries ------------------------------------------------------------------


@frozen
class WebhookQueued:
    """One webhook event to send to one endpoint; its data holds ids only."""

    delivery_id: UUID
    endpoint_id: str
    tenant: str
    webhook_id: str  # the same on every attempt: receivers de-duplicate by it
    event_type: str
    occurred_at: datetime
    data: Mapping[str, str]
    source_event_id: UUID
    available_at: datetime

    @property
    def message_id(self) -> UUID:
        """The outbox's key (its lease events name it so)."""
        return self.delivery_id


@frozen
class WebhookEvent:
    """A fact the application hears of, before it is addressed to endpoints."""

    event_type: str
    tenant: str
    data: Mapping[str, str]
    source_event_id: UUID
    occurred_at: datetime


def webhook_id_of(source_event_id: UUID) -> str:
    """The ``webhook-id`` of every call about one fact: stable across retries, re-drives and endpoints."""
    return f"msg_{source_event_id.hex}"


def delivery_id_of(endpoint_id: str, source_event_id: UUID) -> UUID:
    """One delivery per endpoint and fact: the same id however often the fact is looked at."""
    return uuid.uuid5(_DELIVERY_NAMESPACE, f"{endpoint_id}/{source_event_id}")


def deliveries(event: WebhookEvent, endpoints: Iterable[Endpoint], *, now: datetime) -> list[WebhookQueued]:
    """The deliveries of ``event`` to the tenant's endpoints that listen for its type."""
    return [
        WebhookQueued(delivery_id_of(endpoint.endpoint_id, event.source_event_id), endpoint.endpoint_id,
                      event.tenant, webhook_id_of(event.source_event_id), event.event_type, event.occurred_at,
                      event.data, event.source_event_id, now)
        for endpoint in endpoints
        if endpoint.tenant == event.tenant and endpoint.hears(event.event_type)
    ]


# Log events of a user's streams, by tag: which webhook event each is, and
# the fields of its data. Tags, not classes, so that facts recorded by other
# parts of the code (provider feedback, support's invalidation) join by name.
USER_EVENT_TYPES: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "ResetCompleted": ("reset.consumed", ("request_id",)),
    "OtpChallengeVerified": ("otp.verified", ("challenge_id",)),
    "SubjectErased": ("user.erased", ()),
    # Support withdrew the user's open links and codes: one fact, so one call, per request it closed.
    "ResetInvalidated": ("user.invalidated", ("request_id", "reason")),
    "OtpChallengeInvalidated": ("user.invalidated", ("challenge_id", "reason")),
}
# Events of an outbox row's stream, by tag: the email's outcome. A
# SendAttemptFailed is ``email.failed`` only when the provider refused it for
# good; a retry tells the application nothing yet, and the last failure before
# an abandonment is told by ``email.abandoned``.
EMAIL_EVENT_TYPES: Mapping[str, str] = {
    "ProviderAccepted": "email.accepted",
    "SendAttemptFailed": "email.failed",
    "DeliveryAbandoned": "email.abandoned",
    # Provider feedback (recorded by the bounce and complaint work): joins here by its tag.
    "ProviderBounced": "email.bounced",
    "ProviderComplained": "email.complained",
}


def time_of(event: object) -> datetime:
    """When a fact happened: its first time field (every event of the log has one)."""
    for value in attrs.astuple(event, recurse=False):  # type: ignore[arg-type]
        if isinstance(value, datetime):
            return value
    raise ValueError(f"{type(event).__name__} has no time field")


def user_event_of(tag: str, stream_id: str, event: object, *, event_id: UUID) -> WebhookEvent | None:
    """The webhook event a fact of a user's stream (``<kind>:<scoped user id>``) makes, if any."""
    known = USER_EVENT_TYPES.get(tag)
    if known is None or ":" not in stream_id:
        return None
    event_type, fields = known
    tenant, user_id = split_scoped_user(stream_id.split(":", 1)[1])
    data = {"tenant": tenant, "user_id": user_id}
    data.update({name: str(getattr(event, name)) for name in fields})
    return WebhookEvent(event_type, tenant, data, event_id, time_of(event))


def email_event_of(tag: str, event: object, *, scoped_user_id: str, message_id: UUID, request_id: UUID,
                   event_id: UUID) -> WebhookEvent | None:
    """The webhook event an outcome of an email makes, if any."""
    event_type = EMAIL_EVENT_TYPES.get(tag)
    if event_type is None or (tag == "SendAttemptFailed" and getattr(event, "retryable", True)):
        return None  # a retry, or the last try before an abandonment (which tells of itself)
    tenant, user_id = split_scoped_user(scoped_user_id)
    data = {"tenant": tenant, "user_id": user_id, "message_id": str(message_id), "request_id": str(request_id)}
    return WebhookEvent(event_type, tenant, data, event_id, time_of(event))


# -- signing (the Standard Webhooks specification) ------------------------------------


def secret_text(raw: bytes) -> str:
    return SECRET_PREFIX + base64.b64encode(raw).decode("ascii")


def secret_bytes(text: str) -> bytes:
    return base64.b64decode(text.removeprefix(SECRET_PREFIX))


def body_of(queued: WebhookQueued) -> bytes:
    """The JSON body: ``{"type", "timestamp", "data"}``, compact, keys in a fixed order."""
    payload = {"type": queued.event_type, "timestamp": _iso(queued.occurred_at), "data": dict(queued.data)}
    return json.dumps(payload, separators=(",", ":")).encode("utf-8")


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def signature(secret: bytes, webhook_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(secret, signed, hashlib.sha256).digest()).decode("ascii")


def headers(secrets: Iterable[bytes], webhook_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three headers of a call; one signature per live secret, space-separated."""
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(signature(secret, webhook_id, timestamp, body) for secret in secrets),
        "content-type": "application/json",
    }
