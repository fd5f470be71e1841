"""/docs and the stand-in reset page in a real browser (Debian's chromium, headless): Swagger UI draws
every operation, and neither page's Content-Security-Policy blocks anything (no console message at all)."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from infra.http.app import create_app
from infra.services.unit_of_work import ServiceContext

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (apt-get install chromium)")]


@pytest.fixture
def served(ctx: ServiceContext) -> Iterator[str]:
    """The real app under uvicorn on a free port, in a thread."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(ctx, reset_page=True), host="127.0.0.1", port=port, log_config=None,
                                           lifespan="off", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    started = threading.Event()
    for _ in range(300):
        if server.started:
            started.set()
            break
        started.wait(0.05)
    assert started.is_set(), "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def load(url: str, tmp_path: Path) -> tuple[str, list[str]]:
    """The page's DOM once scripts ran, and what it logged to the console."""
    assert CHROMIUM is not None
    run = subprocess.run(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=15000", "--dump-dom", url],
        capture_output=True, text=True, timeout=90,
    )
    return run.stdout, [line for line in run.stderr.splitlines() if ":CONSOLE" in line]


def test_swagger_ui_renders_every_operation_with_no_csp_violation(served: str, tmp_path: Path) -> None:
    dom, console = load(f"{served}/docs", tmp_path)
    assert console == [], "the page logged to the console:\n" + "\n".join(console)
    paths = set(re.findall(r'data-path="([^"]+)"', dom))
    assert "/v1/password-resets" in paths and "/v1/timeline" in paths, dom[:2000]


def test_the_reset_page_loads_with_no_csp_violation(ctx: ServiceContext, served: str, tmp_path: Path) -> None:
    from domain.reset import RequestReset
    from infra.services.reset import request_reset
    from tests.http.support import token_for

    token = token_for(ctx.engine, str(request_reset(ctx, RequestReset("42", "ada@example.test")).request_id))
    dom, console = load(f"{served}/reset?token={token}", tmp_path)
    assert console == [], "the page logged to the console:\n" + "\n".join(console)
    assert 'data-state="valid"' in dom and "Development stand-in" in dom
