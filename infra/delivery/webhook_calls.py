"""Webhook deliveries in the outbox: the fresh read before a call, and the call itself.

A claimed row of flow "webhook" is read fresh like an email: its
``WebhookQueued`` (what to say) and its endpoint now (where, and the secrets
that sign it). A removed endpoint, or a fact older than ``DELIVERY_HORIZON``,
is not called. The call is signed as the Standard Webhooks specification
says (``domain.webhooks.headers``), with every live secret, at the time it is
made; its ``webhook-id`` is the same on every attempt.

The HTTP client is ``providers/http.py``'s: httpx, a timeout per phase, the
window's connections spread over small pools (``ClientGroup``: one pool of
64 cost 4x the throughput in bench/webhooks.py). A 2xx is delivered; a
timeout, a lost connection, a 429 or a 5xx says the endpoint is down (its
own circuit breaker counts it) and is retried with backoff until the
horizon; 410 Gone refuses for good; any other answer is retried without
counting against the endpoint.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime

import httpx
from attrs import frozen
from sqlalchemy import Connection, select

from domain.errors import ConfigError
from domain.webhooks import DELIVERY_HORIZON, WebhookQueued, body_of, headers, webhook_stream
from infra.db import tables
from infra.delivery.leases import Claim
from infra.delivery.providers.http_clients import ClientGroup
from infra.delivery.providers import OutcomeUnknown, PermanentSendError, ProviderReceipt, RetryableSendError, SendFailed
from infra.eventlog.postgres import PostgresEventStore
from infra.eventlog.subject_keys import MasterKeys, master_keys_for
from infra.services.webhook_secrets import open_secret
from projections.webhook_endpoints import WebhookEndpointRow

PROVIDER = "webhook"
TIMEOUT_SECONDS = 10.0
CONNECTIONS = 64
ANSWER_BYTES = 64 * 1024


@frozen
class WebhookCall:
    """One signed POST, ready to go."""

    endpoint_id: str
    url: str
    headers: dict[str, str]
    body: bytes


@frozen
class Planned:
    """The call to make for a claimed delivery, or why none."""

    call: WebhookCall | None
    skip_reason: str | None
    useful_until: datetime | None = None
    error: str | None = None  # still wanted, but not to be called as things are (its secret cannot be opened)


def endpoint_of(claim: Claim) -> str:
    """The endpoint a delivery row goes to (its ``user_id`` is the endpoint, scoped by the tenant)."""
    return claim.row.user_id.rsplit(" ", 1)[-1]


def plan_calls(connection: Connection, claims: Sequence[Claim], *, now: datetime) -> list[Planned]:
    """``Planned`` for each claimed delivery, in claim order: two statements for the whole group."""
    if not claims:
        return []
    streams = PostgresEventStore(connection).load_many({webhook_stream(c.row.message_id): 0 for c in claims})
    c = tables.webhook_endpoints.c
    rows = connection.execute(select(tables.webhook_endpoints).where(
        c.endpoint_id.in_({endpoint_of(claim) for claim in claims})))
    endpoints = {row.endpoint_id: WebhookEndpointRow(**row._mapping).endpoint() for row in rows}
    try:
        master: MasterKeys | ConfigError = master_keys_for(connection)
    except ConfigError as error:  # no master key configured at all: every delivery waits for one
        master = error
    planned = []
    for claim in claims:
        stream = streams[webhook_stream(claim.row.message_id)]
        [queued] = [r.event for r in stream if isinstance(r.event, WebhookQueued)]
        endpoint = endpoints.get(queued.endpoint_id)
        useful_until = queued.occurred_at + DELIVERY_HORIZON
        if endpoint is None or endpoint.removed_at is not None:
            planned.append(Planned(None, "endpoint_removed"))
        elif now >= useful_until:
            planned.append(Planned(None, "past_horizon"))
        else:
            try:
                if isinstance(master, ConfigError):
                    raise master
                secrets = [open_secret(master, sealed, tenant=endpoint.tenant, endpoint_id=endpoint.endpoint_id)
                           for sealed in endpoint.signing_secrets(now)]
            except ConfigError as error:
                planned.append(Planned(None, None, useful_until, error.message))
                continue
            body = body_of(queued)
            call = WebhookCall(endpoint.endpoint_id, endpoint.url,
                               headers(secrets, queued.webhook_id, int(now.timestamp()), body), body)
            planned.append(Planned(call, None, useful_until))
    return planned


class WebhookClient:
    """POSTs signed webhook calls through a ``ClientGroup`` (small pools; see ``http_clients``), one per event
    loop, closed with ``aclose`` on that loop."""

    def __init__(self, *, timeout: float = TIMEOUT_SECONDS, connections: int = CONNECTIONS) -> None:
        self.timeout, self.connections = timeout, connections
        self._clients: ClientGroup | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _loop_clients(self) -> ClientGroup:
        loop = asyncio.get_running_loop()
        if self._clients is None or self._loop is not loop:
            options = {"timeout": httpx.Timeout(self.timeout), "follow_redirects": False}
            self._clients = ClientGroup(options, self.connections)
            self._loop = loop
        return self._clients

    async def send(self, call: WebhookCall) -> ProviderReceipt:
        try:
            async with self._loop_clients().streamed("POST", call.url, content=call.body,
                                                     headers=call.headers) as response:
                # Only the status matters; a receiver's answer is read up to ANSWER_BYTES and no further, so
                # that an endless body cannot hold a place of the window or fill the worker's memory.
                read = 0
                async for chunk in response.aiter_raw():
                    read += len(chunk)
                    if read >= ANSWER_BYTES:
                        break
        except (httpx.ConnectError, httpx.ConnectTimeout) as error:
            raise RetryableSendError(f"webhook connect failed: {type(error).__name__}", provider_down=True) from None
        except httpx.TimeoutException:
            raise OutcomeUnknown(f"webhook timed out after sending (limit {self.timeout:g}s)",
                                 provider_down=True) from None
        except httpx.HTTPError as error:
            raise OutcomeUnknown(f"webhook connection lost ({type(error).__name__})", provider_down=True) from None
        return _receipt(response)

    async def aclose(self) -> None:
        if self._clients is not None and self._loop is asyncio.get_running_loop():
            await self._clients.aclose()
        self._clients, self._loop = None, None


def _receipt(response: httpx.Response) -> ProviderReceipt:
    status = response.status_code
    if 200 <= status < 300:
        return ProviderReceipt(provider=PROVIDER, provider_message_id=f"http {status}")
    if status == 410:
        raise PermanentSendError("webhook endpoint answered 410 Gone")
    down = status == 429 or status >= 500
    raise SendFailed(f"webhook endpoint answered {status}", retryable=True, provider_down=down)


