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

from sqlalchemy import Connection, select, text

from domain.log import RecordedEvent
from domain.webhooks import EMAIL_EVENT_TYPES, Endpoint, WebhookEvent, WebhookQueued, deliveries, email_event_of
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


OUTBOX_ROWS = text("SELECT message_id, user_id, request_id FROM email_outbox WHERE message_id = ANY(:ids)")


def email_facts(connection: Connection, recorded: Sequence[RecordedEvent]) -> list[WebhookEvent]:
    """The facts told of emails by events appended to their streams outside the worker's fenced outcomes
    (a provider's later bounce or complaint): each email's user and request read from its outbox row."""
    told = [r for r in recorded if r.stream_id.startswith("email:") and r.event_type in EMAIL_EVENT_TYPES]
    if not told:
        return []
    rows = {row.message_id: row for row in connection.execute(
        OUTBOX_ROWS, {"ids": list({r.event.message_id for r in told})})}
    facts = []
    for r in told:
        row = rows.get(r.event.message_id)
        fact = None if row is None else email_event_of(
            r.event_type, r.event, scoped_user_id=row.user_id, message_id=row.message_id,
            request_id=row.request_id, event_id=r.event_id)
        if fact is not None:
            facts.append(fact)
    return facts


def deliveries_for(connection: Connection, events: Sequence[WebhookEvent]) -> list[WebhookQueued]:
    """The deliveries ``events`` make, one per endpoint listening; nothing read when there are no events."""
    if not events:
        return []
    endpoints = ENDPOINTS.of(connection)
    return [queued for event in events
            for queued in deliveries(event, endpoints.get(event.tenant, ()), now=event.occurred_at)]
