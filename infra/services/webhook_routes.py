"""Which endpoints hear a fact: the webhook deliveries the unit of work queues beside the fact itself.

The unit of work asks ``deliveries_for`` about every event it appends (a
decision's, an email outcome's); a fact the application hears of
(``domain.webhooks``) becomes one ``WebhookQueued`` per listening endpoint,
appended in the same transaction, so that a fact is never without its
webhooks nor a webhook without its fact.

The endpoints are read once per ``CACHE_SECONDS`` per process and database
(a change made in this process is seen at once): most facts are of tenants
without endpoints, and the hot paths must not pay a read for them. An
endpoint added from another process hears facts from at most that long
later (docs/webhooks.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from sqlalchemy import Connection, select

from domain.webhooks import Endpoint, WebhookEvent, WebhookQueued, deliveries
from infra.db import tables
from infra.db.identity import database_identity
from projections.webhook_endpoints import WebhookEndpointRow

CACHE_SECONDS = 10.0


class EndpointCache:
    """The active endpoints by tenant, per database, remembered for at most ``seconds``."""

    def __init__(self, *, seconds: float = CACHE_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds, self.clock = seconds, clock
        self._by_database: dict[str, tuple[float, dict[str, list[Endpoint]]]] = {}
        self._lock = threading.Lock()

    def of(self, connection: Connection) -> dict[str, list[Endpoint]]:
        identity, now = database_identity(connection.engine), self.clock()
        with self._lock:
            cached = self._by_database.get(identity)
        if cached is not None and now - cached[0] < self.seconds:
            return cached[1]
        c = tables.webhook_endpoints.c
        by_tenant: dict[str, list[Endpoint]] = {}
        for row in connection.execute(select(tables.webhook_endpoints).where(c.status == "active")):
            endpoint = WebhookEndpointRow(**row._mapping).endpoint()
            by_tenant.setdefault(endpoint.tenant, []).append(endpoint)
        with self._lock:
            self._by_database[identity] = (now, by_tenant)
        return by_tenant

    def clear(self) -> None:
        with self._lock:
            self._by_database.clear()


ENDPOINTS = EndpointCache()


def deliveries_for(connection: Connection, events: Sequence[WebhookEvent]) -> list[WebhookQueued]:
    """The deliveries ``events`` make, one per endpoint listening; nothing read when there are no events."""
    if not events:
        return []
    endpoints = ENDPOINTS.of(connection)
    return [queued for event in events
            for queued in deliveries(event, endpoints.get(event.tenant, ()), now=event.occurred_at)]
