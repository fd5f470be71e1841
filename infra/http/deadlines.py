"""Deadlines for receiving a request, so that a slow client cannot hold a connection or a request for ever.

uvicorn times out only an idle keep-alive connection, and resets that timer
on every byte received: a client trickling its headers or its body a byte at
a time held its connection open without end (slowloris). Two deadlines:

- the headers, in ``DeadlineProtocol`` (uvicorn's httptools protocol): from
  a connection's opening, or a request's first byte on a kept-alive one, to
  the end of the request's headers. Past it the connection is closed, after
  a 408 problem when the request had begun. It has to be the protocol: the
  application is only called once the headers are in.
- the body, in ``BodyDeadline`` (an ASGI layer): what the application reads
  of the body must arrive within the deadline of its call, or ``receive``
  raises ``RequestTimeout``, answered 408 with the connection closed. The
  handlers read the body before any database work, so nothing is written.
  When the application answered without reading the body (a 401 for an
  unknown key), the protocol closes the connection if the rest of that body
  is not in within the same time.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from infra.http.problems import PROBLEM_JSON, RequestTimeout, problem_body, safe_json

# Defaults of the two settings (``infra.config.settings``), for apps made without them (tests, benchmarks).
HEADER_SECONDS = 10.0
BODY_SECONDS = 10.0


def timeout_response(error: RequestTimeout) -> bytes:
    """A whole HTTP/1.1 408 problem response that closes the connection, written by the protocol itself."""
    body = safe_json(problem_body(error))
    head = (f"HTTP/1.1 408 Request Timeout\r\ncontent-type: {PROBLEM_JSON}\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n")
    return head.encode() + body


class DeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline on each request's headers (see the module docstring).

    ``with_deadlines`` makes the subclass that carries the two settings; uvicorn builds one per connection.
    """

    header_seconds = HEADER_SECONDS
    body_seconds = BODY_SECONDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._request_begun = False  # bytes of a request arrived, its headers not all
        self._body_pending = False  # the headers are in, the end of the body is not

    @classmethod
    def with_deadlines(cls, *, header_seconds: float, body_seconds: float) -> type[DeadlineProtocol]:
        return type("DeadlineProtocol", (cls,), {"header_seconds": header_seconds, "body_seconds": body_seconds})

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        answering = self.cycle is not None and not self.cycle.response_complete  # a pipelined request's answer
        if self._request_begun and not answering:
            self.transport.write(timeout_response(RequestTimeout(
                f"the request's headers did not arrive within {self.header_seconds:g} seconds")))
        self.transport.close()

    # A connection that says nothing is held to the header deadline as well.
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.header_seconds)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._request_begun = True
        if self._deadline is None:  # a new connection's deadline runs from its opening, not its first byte
            self._arm(self.header_seconds)

    def on_headers_complete(self) -> None:
        self._disarm()
        self._request_begun, self._body_pending = False, True
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        self._body_pending = False
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._body_pending and not self.transport.is_closing():
            # Answered before its body came in: the rest may still come, as fast as any body must.
            self._arm(self.body_seconds)


class BodyDeadline:
    """ASGI layer: the request body, as far as the application reads it, within ``seconds`` of its call."""

    def __init__(self, app: ASGIApp, *, seconds: float = BODY_SECONDS) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        deadline = anyio.current_time() + self.seconds
        body_done = False

        async def receive_in_time() -> Message:
            nonlocal body_done
            if body_done:  # waiting for a disconnect, say: no deadline on that
                return await receive()
            with anyio.CancelScope(deadline=deadline) as waiting:
                message = await receive()
            if waiting.cancelled_caught:
                raise RequestTimeout(f"the request body did not arrive within {self.seconds:g} seconds")
            body_done = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        await self.app(scope, receive_in_time, send)
