"""A webhook receiver for tests: a real HTTP server on a thread, verifying every call as the specification says.

The verification is written here from the Standard Webhooks specification
(hmac and base64 only), independent of ``domain.webhooks``: a call counts as
verified when one of the space-separated ``v1,`` signatures is the base64
HMAC-SHA256 of ``<webhook-id>.<webhook-timestamp>.<body>`` under one of the
secrets the test gave it (``whsec_`` + base64 of the key's bytes).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from attrs import frozen


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """The specification's check, from scratch: does any ``v1`` signature match under ``secret``?"""
    key = base64.b64decode(secret.split("_", 1)[1])
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    given = [part.split(",", 1) for part in headers["webhook-signature"].split(" ")]
    return any(version == "v1" and hmac.compare_digest(value, expected) for version, value in given)


@frozen
class Call:
    headers: dict[str, str]
    body: bytes
    status: int  # what the receiver answered
    verified_by: tuple[str, ...]  # the secrets whose signature matched

    @property
    def webhook_id(self) -> str:
        return self.headers["webhook-id"]

    @property
    def payload(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed

    @property
    def type(self) -> str:
        return str(self.payload["type"])


class Receiver:
    """Keeps every call; answers ``status`` (a 500 for a while, say), verifying against ``secrets``."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.secrets: list[str] = []
        self.status = 204
        self.lock = threading.Lock()
        self.url = ""
        self.port = 0
        self.handler: type[BaseHTTPRequestHandler] = BaseHTTPRequestHandler
        self._server: ThreadingHTTPServer | None = None
        self._thread = threading.Thread()

    def up(self, port: int = 0) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", port or self.port), self.handler)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hooks"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def down(self) -> None:
        """Stop answering: connections are refused until ``up()``."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._server = None

    def accepted(self) -> list[Call]:
        with self.lock:
            return [call for call in self.calls if 200 <= call.status < 300]

    def types(self) -> set[str]:
        return {call.type for call in self.accepted()}


@contextmanager
def running_receiver() -> Iterator[Receiver]:
    """A receiver on a free loopback port; ``receiver.down()`` and ``up()`` stop and restart it on that port."""
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            headers = {name.lower(): value for name, value in self.headers.items()}
            with receiver.lock:
                status = receiver.status
                verified = tuple(s for s in receiver.secrets if verify(s, headers, body))
                receiver.calls.append(Call(headers, body, status, verified))
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    receiver.handler = Handler
    receiver.up()
    try:
        yield receiver
    finally:
        receiver.down()
