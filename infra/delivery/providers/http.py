"""Delivery through an HTTP JSON email API (Resend-style) with httpx."""

from __future__ import annotations

import asyncio
import importlib.util
import ipaddress
import re
import ssl
from typing import Any

import httpx

from domain.errors import ConfigError
from infra.delivery.providers import (
    OutboundEmail,
    OutcomeUnknown,
    PermanentSendError,
    ProviderReceipt,
    RetryableSendError,
    SendFailed,
    single_recipient,
)
from infra.config.values import mask_url
from infra.delivery.providers.http_clients import ClientGroup

# A provider's machine-readable error name ("validation_error") is worth
# keeping in the error; its prose is not, as it may quote the request.
_ERROR_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")

# httpx speaks HTTP/2 (negotiated over TLS, so plain-http stubs stay on 1.1)
# only with the h2 package, which ``httpx[http2]`` brings.
_HTTP2 = importlib.util.find_spec("h2") is not None


class HttpMailer:
    """POSTs each email as JSON, with the message id as ``Idempotency-Key``.

    The provider deduplicates on the key, so a retry after an unknown outcome
    is safe: it either sends the email or returns the first send's id. That
    is also why a send that overruns ``timeout`` is harmless here: httpx
    applies the timeout to each phase (connect, write, read) rather than to
    the whole request, and a late duplicate is answered from the key.

    ``send`` goes through one ``httpx.Client``, ``send_async`` through a
    ``ClientGroup`` of async clients made on first use inside the running
    event loop (a client belongs to the loop it was made in). Both keep up to
    ``window`` connections, one per send the worker has in flight, and speak
    HTTP/2 when the provider offers it over TLS, which carries the window
    over a few connections. Call ``close`` and ``aclose`` when done.
    """

    name = "http"
    idempotent = True  # the provider honours Idempotency-Key

    def __init__(self, url: str, *, api_key: str | None = None, timeout: float = 10.0, window: int = 1) -> None:
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL:
            raise ConfigError("HTTP provider URL is malformed") from None
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ConfigError("HTTP provider URL must be http:// or https:// with a host")
        if api_key is not None and parsed.scheme == "http" and not _is_loopback(parsed.host):
            raise ConfigError("HTTP provider API key needs https unless the provider is on this machine")
        if not timeout > 0:
            raise ConfigError("HTTP provider timeout must be positive")
        if window < 1:
            raise ConfigError("HTTP provider window must be at least 1")
        self.url = url
        self.timeout_seconds = float(timeout)
        headers = {"User-Agent": "authledger", "Accept": "application/json"}
        if api_key is not None:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client_options: dict[str, Any] = {
            "headers": headers,
            "timeout": httpx.Timeout(timeout),
            # A redirect means a wrong URL; following it would resend the
            # secret body (and the key) somewhere nobody configured.
            "follow_redirects": False,
            "http2": _HTTP2,
        }
        self.window = window
        limits = httpx.Limits(max_connections=window, max_keepalive_connections=window)
        self._client = httpx.Client(**self._client_options, limits=limits)
        self._async_client: ClientGroup | None = None
        self._async_loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        # A provider URL may carry credentials in its userinfo or query: shown masked, as config show does.
        return f"HttpMailer({mask_url(self.url)!r})"

    def close(self) -> None:
        self._client.close()

    async def aclose(self) -> None:
        client, self._async_client, self._async_loop = self._async_client, None, None
        if client is not None:
            await client.aclose()

    def __enter__(self) -> HttpMailer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def send(self, email: OutboundEmail) -> ProviderReceipt:
        try:
            response = self._client.post(self.url, **_request(email))
        except httpx.RequestError as e:
            raise self._unanswered(e) from e
        return self._receipt(response)

    async def send_async(self, email: OutboundEmail) -> ProviderReceipt:
        client = self._loop_client()
        try:
            response = await client.post(self.url, **_request(email))
        except httpx.RequestError as e:
            raise self._unanswered(e) from e
        return self._receipt(response)

    def _loop_client(self) -> ClientGroup:
        loop = asyncio.get_running_loop()
        if self._async_client is None:
            self._async_client = ClientGroup(self._client_options, self.window)
            self._async_loop = loop
        elif self._async_loop is not loop:
            # Its connections are bound to the other loop's transports.
            raise RuntimeError("HttpMailer.send_async was used from another event loop; aclose() it there first")
        return self._async_client

    def _unanswered(self, error: httpx.RequestError) -> SendFailed:
        """The failure when no HTTP answer came back, by how far the request got."""
        if isinstance(error, httpx.PoolTimeout):
            # Our own pool was full: more sends in flight than the window. It
            # says nothing about the provider, and nothing was sent.
            return RetryableSendError("http connection pool exhausted")
        if isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout)):
            # Nothing was sent: the request never left this machine.
            return RetryableSendError(f"http connect failed: {_reason(error)}", provider_down=True)
        if isinstance(error, httpx.TimeoutException):
            return OutcomeUnknown(
                f"http timed out after sending (limit {self.timeout_seconds:g}s); the provider may have accepted it",
                provider_down=True,
            )
        return OutcomeUnknown(
            f"http connection lost ({type(error).__name__}); the provider may have accepted it", provider_down=True
        )

    def _receipt(self, response: httpx.Response) -> ProviderReceipt:
        status = response.status_code
        body = _json(response)
        provider_id = body.get("id")
        if (200 <= status < 300 or status == 409) and isinstance(provider_id, str) and provider_id != "":
            # 409 with an id: this key was sent before, and that send stands.
            return ProviderReceipt(provider=self.name, provider_message_id=provider_id)
        raise _failure(status, body)


def _request(email: OutboundEmail) -> dict[str, Any]:
    """The POST's body and headers, the same for ``send`` and ``send_async``.

    ``to`` is one address as a single JSON string, never a list and never
    text a provider could split: ``single_recipient`` refuses anything but one
    plain addr-spec (``PermanentSendError``, raised before any request).
    """
    payload: dict[str, Any] = {
        "from": email.sender,
        "to": single_recipient(email).addr_spec,
        "subject": email.subject,
        "text": email.text_body,
        "html": email.html_body,
        # The language, as a header of the email: the provider's API takes extra headers (Resend's
        # ``headers`` object), so the recipient's client sees it as it would from SMTP.
        "headers": {"Content-Language": email.locale},
    }
    if email.reply_to is not None:
        payload["reply_to"] = email.reply_to
    return {"json": payload, "headers": {"Idempotency-Key": str(email.message_id)}}


def _failure(status: int, body: dict[str, Any]) -> SendFailed:
    """The failure an HTTP answer means.

    ``provider_down`` is set where every email would get the same answer:
    5xx, 429 (rate limited), 408 (the provider gave up waiting for us), 401
    and 403 (the account), a 2xx without an id (a proxy or portal in the
    way) and other unexpected statuses (a wrong URL). A 409 and the other
    4xx are about this one request.
    """
    detail = f"http {status}" + _error_name(body)
    if 200 <= status < 300:
        # Not necessarily the provider: a proxy or a captive portal answers
        # 200 with HTML too. Asking again with the same key settles it.
        return OutcomeUnknown(f"{detail} without an id in the response", provider_down=True)
    if status == 409:
        # The key is in flight elsewhere, or was used with another body; only
        # a later answer for the same key says whether the email went out.
        return OutcomeUnknown(f"{detail}: idempotency conflict")
    if status in (408, 429) or status >= 500:
        return RetryableSendError(detail, provider_down=True)
    if status in (401, 403):
        # The account, not this email: keep the email retrying while an
        # operator fixes the key, instead of failing every email meanwhile.
        return RetryableSendError(f"{detail}: the provider refused the API key", provider_down=True)
    if 400 <= status < 500:
        return PermanentSendError(detail)
    return RetryableSendError(f"{detail}: unexpected status", provider_down=True)


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _error_name(body: dict[str, Any]) -> str:
    for field in ("name", "code", "error"):
        value = body.get(field)
        if isinstance(value, str) and _ERROR_NAME.fullmatch(value):
            return f" ({value})"
    return ""


def _reason(error: BaseException) -> str:
    """A short reason from the chain: the TLS failure, or the socket error's text."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            reason = getattr(seen, "verify_message", None) or getattr(seen, "reason", None)
            return f"TLS {reason or type(seen).__name__}"
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror
        seen = seen.__cause__ or seen.__context__
    return type(error).__name__


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
