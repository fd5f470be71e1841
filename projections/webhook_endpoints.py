"""The ``webhook_endpoints`` read model: one row per endpoint, its URL, event types and sealed secrets.

A pure fold of the ``webhooks:<tenant>`` streams (``domain.webhooks``). The
secrets are kept sealed, as the events hold them: the worker opens them with
the master key to sign, nothing else does. Removed endpoints keep their row.
"""

from __future__ import annotations

from datetime import datetime

from attrs import evolve, frozen

from domain.webhooks import (
    Endpoint,
    SealedSecret,
    WebhookEndpointAdded,
    WebhookEndpointRemoved,
    WebhookSecretRotated,
)


@frozen
class WebhookEndpointRow:
    endpoint_id: str
    tenant: str
    url: str
    event_types: str  # space-separated, in domain.webhooks.EVENT_TYPES order; empty: every type
    status: str  # "active" or "removed"
    secret_id: str
    master_key_id: str
    sealed_secret: str
    created_at: datetime
    rotated_at: datetime | None = None
    previous_secret_id: str | None = None
    previous_master_key_id: str | None = None
    previous_sealed_secret: str | None = None
    previous_until: datetime | None = None
    removed_at: datetime | None = None

    def endpoint(self) -> Endpoint:
        previous = None
        if self.previous_secret_id is not None:
            assert self.previous_master_key_id is not None and self.previous_sealed_secret is not None
            previous = SealedSecret(self.previous_secret_id, self.previous_master_key_id, self.previous_sealed_secret)
        return Endpoint(self.endpoint_id, self.tenant, self.url, tuple(self.event_types.split()),
                        SealedSecret(self.secret_id, self.master_key_id, self.sealed_secret), self.created_at,
                        previous, self.previous_until, self.removed_at)


def webhook_endpoint_key(event: object) -> str | None:
    match event:
        case WebhookEndpointAdded() | WebhookSecretRotated() | WebhookEndpointRemoved():
            return event.endpoint_id
    return None


def evolve_webhook_endpoint(row: WebhookEndpointRow | None, event: object) -> WebhookEndpointRow | None:
    match event:
        case WebhookEndpointAdded():
            return WebhookEndpointRow(
                event.endpoint_id, event.tenant, event.url, " ".join(event.event_types), "active",
                event.secret.secret_id, event.secret.master_key_id, event.secret.sealed, event.added_at)
        case WebhookSecretRotated() if row is not None:
            return evolve(
                row, secret_id=event.secret.secret_id, master_key_id=event.secret.master_key_id,
                sealed_secret=event.secret.sealed, rotated_at=event.rotated_at,
                previous_secret_id=row.secret_id, previous_master_key_id=row.master_key_id,
                previous_sealed_secret=row.sealed_secret, previous_until=event.previous_until)
        case WebhookEndpointRemoved() if row is not None:
            return evolve(row, status="removed", removed_at=event.removed_at)
    return row
