"""A real HTTP email provider for tests, honouring ``Idempotency-Key`` like Resend.

    with FakeHttpProvider() as provider:
        mailer = HttpMailer(provider.url)
        ...
        assert provider.sends_by_key == {str(message_id): 1}

It listens on 127.0.0.1 on a free port and serves each request in its own
thread, so it can stand in for the provider in chaos tests with many
workers. Behaviour:

- ``POST /emails`` with a JSON body is an email. The first request with a
  given ``Idempotency-Key`` sends it (recorded in ``accepted``) and answers
  200 ``{"id": ...}``. A replay with the same body answers ``replay_status``
  (200 by default, like Resend; 409 for providers that answer so) with the
  same id and sends nothing. The same key with another body answers 409
  ``invalid_idempotent_request`` without an id. A request without the header
  is sent every time.
- ``fail_next(n, status)`` answers the next ``n`` requests with ``status``
  and sends nothing; with ``after_sending=True`` it sends first and then
  answers the error, the provider's half of an unknown outcome.
- ``delay(seconds)`` holds every answer that long *after* the send is done,
  so a client that times out has still had its email sent.
- ``connections`` counts the TCP connections it accepted. Each answer
  closes its connection (HTTP/1.0) unless ``keep_alive=True``; then close
  every client before the provider, which waits for their connections.
- ``hold_answers_until(n)`` answers nothing until ``n`` requests wait at
  once, then answers them and holds no more: a window proven full by what
  happened, not by how long it took. (If they never come, it answers after
  ``HOLD_SECONDS`` so the test can fail with its own message.)
- ``in_flight`` is how many requests it is serving now, from reading the
  request to writing the answer (delay included); ``peak_in_flight`` the
  most at one moment.
- ``down(status)`` answers every request with ``status`` (503 by default) and
  sends nothing, until ``up()``: a provider-wide outage.
- With ``api_key`` set, a request without ``Authorization: Bearer <api_key>``
  gets 401.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from attrs import frozen

PATH = "/emails"
HOLD_SECONDS = 30.0


@frozen
class Accepted:
    """One email the provider sent: a logical send, not a request."""

    id: str
    idempotency_key: str | None
    payload: dict[str, Any]


@frozen
class Received:
    """One HTTP request as it arrived, and the status it was answered with."""

    idempotency_key: str | None
    authorization: str | None
    payload: Any
    status: int


class FakeHttpProvider:
    def __init__(self, *, api_key: str | None = None, replay_status: int = 200, keep_alive: bool = False) -> None:
        self.api_key = api_key
        self.keep_alive = keep_alive
        self.replay_status = replay_status
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._accepted: list[Accepted] = []
        self._by_key: dict[str, Accepted] = {}
        self._requests: list[Received] = []
        self._failures: list[tuple[int, bool]] = []
        self._delay = 0.0
        self._connections = 0
        self._down: int | None = None
        self._in_flight = 0
        self._peak_in_flight = 0
        self._hold_until: int | None = None
        self._filled = threading.Event()
        self._filled.set()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.provider = self
        # A short poll interval keeps shutdown (and so every test) fast.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-http-provider", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}{PATH}"

    def __enter__(self) -> FakeHttpProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._closing.set()  # wakes delayed answers, so closing is quick
        self._filled.set()
        self._server.shutdown()
        self._server.server_close()  # joins the request threads
        self._thread.join()

    # -- what the test tells it -------------------------------------------

    def fail_next(self, n: int, status: int = 503, *, after_sending: bool = False) -> None:
        with self._lock:
            self._failures.extend([(status, after_sending)] * n)

    def delay(self, seconds: float) -> None:
        with self._lock:
            self._delay = seconds

    def hold_answers_until(self, in_flight: int) -> None:
        with self._lock:
            self._hold_until = in_flight
            self._filled.clear()

    def down(self, status: int = 503) -> None:
        with self._lock:
            self._down = status

    def up(self) -> None:
        with self._lock:
            self._down = None

    # -- what the test reads (snapshots, safe to read while it serves) ------

    @property
    def sends_by_key(self) -> dict[str, int]:
        """Emails sent per idempotency key: 1 per key when deduplication works."""
        with self._lock:
            return dict(Counter(a.idempotency_key for a in self._accepted if a.idempotency_key is not None))

    @property
    def requests_by_key(self) -> dict[str | None, int]:
        """Requests received per idempotency key, replays and failures included."""
        with self._lock:
            return dict(Counter(r.idempotency_key for r in self._requests))

    @property
    def connections(self) -> int:
        with self._lock:
            return self._connections

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    @property
    def peak_in_flight(self) -> int:
        with self._lock:
            return self._peak_in_flight

    @property
    def accepted(self) -> list[Accepted]:
        with self._lock:
            return list(self._accepted)

    @property
    def requests(self) -> list[Received]:
        with self._lock:
            return list(self._requests)

    # -- serving -----------------------------------------------------------

    def _connected(self) -> None:
        with self._lock:
            self._connections += 1

    def _arrived(self) -> None:
        with self._lock:
            self._in_flight += 1
            self._peak_in_flight = max(self._peak_in_flight, self._in_flight)
            if self._hold_until is not None and self._in_flight >= self._hold_until:
                self._hold_until = None
                self._filled.set()

    def _answered(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _answer(self, key: str | None, authorization: str | None, payload: Any) -> tuple[int, dict[str, Any], float]:
        with self._lock:
            status, body = self._decide(key, authorization, payload)
            self._requests.append(Received(key, authorization, payload, status))
            return status, body, self._delay

    def _decide(self, key: str | None, authorization: str | None, payload: Any) -> tuple[int, dict[str, Any]]:
        if self._down is not None:
            return self._down, _problem(self._down, "provider_down")
        failure = self._failures.pop(0) if self._failures else None
        if failure is not None and not failure[1]:
            return failure[0], _problem(failure[0], "injected_failure")
        if self.api_key is not None and authorization != f"Bearer {self.api_key}":
            return 401, _problem(401, "missing_api_key")
        if not isinstance(payload, dict):
            return 422, _problem(422, "validation_error")
        status, body = self._send(key, payload)
        if failure is not None:
            return failure[0], _problem(failure[0], "injected_failure")
        return status, body

    def _send(self, key: str | None, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        earlier = self._by_key.get(key) if key is not None else None
        if earlier is not None:
            if earlier.payload != payload:
                return 409, _problem(409, "invalid_idempotent_request")
            return self.replay_status, {"id": earlier.id}
        sent = Accepted(str(uuid.uuid4()), key, payload)
        self._accepted.append(sent)
        if key is not None:
            self._by_key[key] = sent
        return 200, {"id": sent.id}


def _problem(status: int, name: str) -> dict[str, Any]:
    return {"statusCode": status, "name": name, "message": f"fake provider answered {status}"}


class _Server(ThreadingHTTPServer):
    # Request threads are joined on close, so none outlives the provider.
    daemon_threads = False
    # A worker opens a window of connections at once; the default backlog of
    # 5 would make the kernel drop the rest and their clients wait a second.
    request_queue_size = 256
    provider: FakeHttpProvider

    def process_request(self, request: Any, client_address: Any) -> None:
        self.provider._connected()
        super().process_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out hangs up before its delayed answer: expected.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def setup(self) -> None:
        super().setup()
        # The answer goes out as two writes (head, body); without NODELAY the
        # second waits for the client's delayed ACK, 40 ms per request on a
        # kept-alive connection. Real servers set it too.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # HTTP/1.1 keeps the connection open for the next request.
        self.protocol_version = "HTTP/1.1" if self.server.provider.keep_alive else "HTTP/1.0"

    def do_POST(self) -> None:
        if self.path != PATH:
            self._reply(404, _problem(404, "not_found"))
            return
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            payload = json.loads(raw)
        except ValueError:
            payload = None
        provider = self.server.provider
        provider._arrived()
        try:
            status, body, delay = provider._answer(
                self.headers.get("Idempotency-Key"), self.headers.get("Authorization"), payload
            )
            provider._filled.wait(HOLD_SECONDS)
            if delay:
                provider._closing.wait(delay)
            self._reply(status, body)
        finally:
            provider._answered()

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass
