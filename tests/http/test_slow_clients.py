"""Slow clients against `authledger serve`: headers and bodies have deadlines, and a key is checked before a body.

Each test talks raw HTTP/1.1 over a socket, so that it can stop half-way
through a request. The deadlines are set short; the tests assert what the
server did (the status, the closed connection, the log unchanged), never how
long it took. A socket timeout only keeps a broken server from hanging the test.
"""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from sqlalchemy import Engine

from infra.services.clients import create_client
from infra.services.unit_of_work import ServiceContext
from tests.http.support import log_size
from tests.support.cli import Env
from tests.support.servers import start_serve

pytestmark = pytest.mark.slow  # each test starts `authledger serve`

UNKNOWN_KEY = "alk_" + "A" * 43
HANG_GUARD_SECONDS = 60


@pytest.fixture
def server(env: Env, tmp_path: Path) -> Iterator[str]:
    env = {**env, "AUTHLEDGER_DATA_DIR": str(tmp_path / "data"),
           "AUTHLEDGER_HTTP_HEADER_TIMEOUT": "0.5", "AUTHLEDGER_HTTP_BODY_TIMEOUT": "0.5"}
    process, base = start_serve(env, tmp_path, "--inflight", "0")
    yield base
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def connect(base: str) -> socket.socket:
    address = urlsplit(base)
    return socket.create_connection((address.hostname, address.port), timeout=HANG_GUARD_SECONDS)


def until_closed(connection: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    received = b""
    while chunk := connection.recv(65536):
        received += chunk
    return received


def status_and_problem(answer: bytes) -> tuple[int, dict[str, str], dict[str, object]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode().split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, json.loads(body)


def post_head(path: str, *, api_key: str, length: int) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: authledger.test\r\nAuthorization: Bearer {api_key}\r\n"
            f"Content-Type: application/json\r\nIdempotency-Key: slow-1\r\nContent-Length: {length}\r\n\r\n").encode()


def test_a_request_whose_headers_stall_is_answered_408_and_closed_while_other_clients_are_served(
    server: str,
) -> None:
    with connect(server) as stalled, connect(server) as silent:
        stalled.sendall(b"POST /v1/password-resets HTTP/1.1\r\nHost: authledger.test\r\nContent-Type: app")

        assert httpx.get(f"{server}/healthz", timeout=HANG_GUARD_SECONDS).status_code == 200

        status, headers, problem = status_and_problem(until_closed(stalled))
        assert (status, headers["connection"]) == (408, "close")
        assert (problem["type"], problem["code"]) == ("urn:authledger:problem:request-timeout", "request_timeout")
        assert "headers did not arrive" in str(problem["detail"])
        assert until_closed(silent) == b"", "a connection that never said a word is closed without an answer"
    assert httpx.get(f"{server}/healthz", timeout=HANG_GUARD_SECONDS).status_code == 200


def test_a_body_that_trickles_past_its_deadline_is_answered_408_and_writes_nothing(
    server: str, ctx: ServiceContext, engine: Engine
) -> None:
    api_key = create_client(ctx, "slow-sender").api_key
    before = log_size(engine)
    body = json.dumps({"user_id": "42", "email": "ada@example.com"}).encode()
    with connect(server) as slow:
        slow.sendall(post_head("/v1/password-resets", api_key=api_key, length=len(body)) + body[:10])

        status, headers, problem = status_and_problem(until_closed(slow))

    assert (status, headers["connection"], problem["type"]) == (408, "close", "urn:authledger:problem:request-timeout")
    assert "body did not arrive" in str(problem["detail"])
    assert log_size(engine) == before


def test_an_unknown_key_is_answered_401_without_waiting_for_the_body(server: str, engine: Engine) -> None:
    before = log_size(engine)
    with connect(server) as caller:
        # A body is announced and never sent: waiting for it would have ended in a 408 at the body deadline.
        caller.sendall(post_head("/v1/password-resets", api_key=UNKNOWN_KEY, length=10_000))

        answer = until_closed(caller)  # closed at last: the announced body never came

    status, headers, problem = status_and_problem(answer)
    assert (status, problem["type"]) == (401, "urn:authledger:problem:unauthorized")
    assert headers["www-authenticate"].startswith("Bearer")
    assert log_size(engine) == before
