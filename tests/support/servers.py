"""The one way tests run a real server: the app under uvicorn in a thread, or `authledger serve` as a process.

Both listen on a free port of 127.0.0.1 and are handed over only once they
answer, judged by uvicorn's own ``started`` flag or by ``/healthz``, never by
a guess of how long starting takes.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from tests.support.cli import Env, process_env
from tests.support.waiting import wait_until

AUTHLEDGER = str(Path(sys.executable).parent / "authledger")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def served(app: Any, *, lifespan: bool = False) -> Iterator[str]:
    """``app`` under uvicorn on a free port, in a thread; its base URL. ``lifespan``: run the app's (which
    sizes the request threadpool and starts what runs beside it)."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_config=None,
                                           lifespan="on" if lifespan else "off", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started or None, what="uvicorn to start")
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(10)


def start_serve(env: Env, tmp_path: Path, *options: str) -> tuple[subprocess.Popen[bytes], str]:
    """`authledger serve` with ``options`` on a free port, answering ``/healthz``; its process and base URL.

    Its output goes to ``serve.out`` and ``serve.err`` in ``tmp_path``; the caller stops the process.
    """
    port = free_port()
    with (tmp_path / "serve.out").open("wb") as out, (tmp_path / "serve.err").open("wb") as err:
        process = subprocess.Popen([AUTHLEDGER, "serve", "--port", str(port), *options],
                                   env=process_env(env), stdout=out, stderr=err)
    base = f"http://127.0.0.1:{port}"

    def up() -> bool | None:
        assert process.poll() is None, (tmp_path / "serve.err").read_text()
        try:
            return httpx.get(f"{base}/healthz", timeout=1).status_code == 200 or None
        except httpx.TransportError:
            return None

    wait_until(up, what="the server to answer")
    return process, base
