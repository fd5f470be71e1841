"""Webhook endpoints of a tenant: add (the secret is shown once), list, rotate the secret with overlap, remove.

Each is a decision on the tenant's ``webhooks:<tenant>`` stream, folded inline
into ``webhook_endpoints``. The secret is made here, sealed under the master
key (``webhook_secrets``) and returned to the caller once; only its sealed
form is recorded. A URL must be https, except to this machine (the rule of
every outbound URL, ``infra.config.values.https_url``).
"""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit
from collections.abc import Iterable, Mapping
from typing import Any

from attrs import frozen
from sqlalchemy import select

from domain.errors import InvalidInput
from domain.tenants import check_tenant_name
from domain.webhooks import (
    MAX_URL_LENGTH,
    check_endpoint_id,
    check_event_types,
    decide_add,
    decide_remove,
    decide_rotate,
    endpoints_stream,
    fold_endpoints,
)
from infra.config.values import https_url
from infra.db import tables
from infra.eventlog.subject_keys import MasterKeys, master_keys_for
from infra.services.tenants import require_tenant
from infra.services.unit_of_work import ServiceContext, decide_events_on_stream
from infra.services.webhook_routes import ENDPOINTS
from infra.services.webhook_secrets import new_secret
from projections.webhook_endpoints import WebhookEndpointRow


@frozen
class NewSecret:
    """An endpoint and its new secret: the one time the secret is shown."""

    endpoint_id: str
    tenant: str
    url: str
    event_types: tuple[str, ...]
    secret: str  # whsec_...; never stored, never logged

    def as_json(self) -> dict[str, Any]:
        return {"endpoint_id": self.endpoint_id, "tenant": self.tenant, "url": self.url,
                "event_types": list(self.event_types), "secret": self.secret}


def check_url(url: object) -> str:
    if not isinstance(url, str) or not url or len(url) > MAX_URL_LENGTH:
        raise InvalidInput(f"a webhook URL is 1-{MAX_URL_LENGTH} characters")
    try:
        checked = https_url(url)
    except ValueError as error:
        raise InvalidInput(f"the webhook URL {error}") from None
    if "@" in urlsplit(checked).netloc:
        # It would be recorded in the log for ever, in clear: the signature is what authenticates a call.
        raise InvalidInput("a webhook URL holds no user name or password; the signature authenticates each call")
    return checked


def _master(ctx: ServiceContext) -> MasterKeys:
    with ctx.engine.connect() as connection:
        return master_keys_for(connection)


def add_endpoint(ctx: ServiceContext, tenant: str, url: str, event_types: Iterable[str] = (),
                 metadata: Mapping[str, Any] | None = None) -> NewSecret:
    """A new endpoint of ``tenant`` hearing ``event_types`` (none: every type), and its secret, shown once."""
    check_tenant_name(tenant)
    url, types = check_url(url), check_event_types(event_types)
    require_tenant(ctx.engine, tenant)
    endpoint_id = "ep_" + secrets.token_hex(16)
    secret, sealed = new_secret(_master(ctx), tenant=tenant, endpoint_id=endpoint_id)
    decide_events_on_stream(
        ctx, endpoints_stream(tenant), fold_endpoints,
        lambda state, now: decide_add(state, endpoint_id=endpoint_id, tenant=tenant, url=url, event_types=types,
                                      secret=sealed, now=now), metadata)
    ENDPOINTS.clear()
    return NewSecret(endpoint_id, tenant, url, types, secret)


def rotate_endpoint(ctx: ServiceContext, tenant: str, endpoint_id: str,
                    metadata: Mapping[str, Any] | None = None) -> NewSecret:
    """A new secret for the endpoint; the old one keeps signing beside it for ``ROTATION_OVERLAP``."""
    check_tenant_name(tenant)
    check_endpoint_id(endpoint_id)
    secret, sealed = new_secret(_master(ctx), tenant=tenant, endpoint_id=endpoint_id)
    decide_events_on_stream(ctx, endpoints_stream(tenant), fold_endpoints,
                            lambda state, now: decide_rotate(state, endpoint_id, secret=sealed, now=now), metadata)
    ENDPOINTS.clear()
    [row] = [row for row in list_endpoints(ctx, tenant) if row.endpoint_id == endpoint_id]
    return NewSecret(endpoint_id, tenant, row.url, tuple(row.event_types.split()), secret)


def remove_endpoint(ctx: ServiceContext, tenant: str, endpoint_id: str,
                    metadata: Mapping[str, Any] | None = None) -> None:
    """Stop calling the endpoint: deliveries not yet made are skipped."""
    check_tenant_name(tenant)
    check_endpoint_id(endpoint_id)
    decide_events_on_stream(ctx, endpoints_stream(tenant), fold_endpoints,
                            lambda state, now: decide_remove(state, endpoint_id, now=now), metadata)
    ENDPOINTS.clear()


def list_endpoints(ctx: ServiceContext, tenant: str | None = None) -> list[WebhookEndpointRow]:
    """Every endpoint, removed ones too, by tenant then creation; only ``tenant``'s when given."""
    c = tables.webhook_endpoints.c
    query = select(tables.webhook_endpoints).order_by(c.tenant, c.created_at, c.endpoint_id)
    if tenant is not None:
        query = query.where(c.tenant == check_tenant_name(tenant))
    with ctx.engine.connect() as connection:
        return [WebhookEndpointRow(**row._mapping) for row in connection.execute(query)]


def endpoint_json(row: WebhookEndpointRow) -> dict[str, Any]:
    """An endpoint as the CLI and the API list it: never a secret, sealed or not."""
    return {"endpoint_id": row.endpoint_id, "tenant": row.tenant, "url": row.url,
            "event_types": row.event_types.split(), "status": row.status, "created_at": row.created_at.isoformat(),
            "secret_id": row.secret_id, "previous_secret_until": row.previous_until.isoformat()
            if row.previous_until else None, "removed_at": row.removed_at.isoformat() if row.removed_at else None}
