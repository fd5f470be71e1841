"""`authledger serve`: the HTTP API and the delivery workers in one process.

uvicorn runs the app; the app's lifespan runs the delivery worker in a
thread, so one SIGTERM or Ctrl-C stops both: uvicorn stops accepting,
finishes the requests in hand, then the worker finishes its sends in flight
and gives back what it claimed and had not started. On the embedded default the database is initialised on
start and a development API key (every scope, default tenant) is made (once) and printed.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from types import FrameType

import uvicorn

from domain.clients import SCOPES
from domain.errors import NotFound
from infra.bootstrap import App, stop_on_sigterm
from infra.config import Settings
from infra.http.app import create_app
from infra.console.app import Console
from infra.audit.digest import signing_key
from infra.services.clients import authenticate, create_client, revoke_client
from infra.logs import configure_logging
from infra.db.schema import init_schema
from infra.projector.catchup import CatchUpRunner
from infra.delivery.worker import Worker

DEV_CLIENT = "dev"
DEV_KEY_FILE = "dev-api-key"
SERVE_METADATA = {"actor": "authledger serve", "client": "cli", "command": "serve"}
# Requests run in a threadpool; each holds at most one connection at a time.
API_POOL_SIZE = 10


def ensure_dev_key(app: App) -> tuple[str, Path]:
    """The development client's key, from the data directory, or a new client and file (mode 0600)."""
    path = app.settings.data_dir / DEV_KEY_FILE
    if path.exists():
        key = path.read_text().strip()
        caller = authenticate(app.engine, key)
        if caller is not None and caller.client == DEV_CLIENT and caller.scopes == frozenset(SCOPES):
            return key, path
    try:  # the file was lost or the database reset: start the dev client afresh
        revoke_client(app.services, DEV_CLIENT, metadata=SERVE_METADATA)
    except NotFound:
        pass
    # Every scope, so that the quick start and the console work with one key.
    key = create_client(app.services, DEV_CLIENT, metadata=SERVE_METADATA, scopes=SCOPES).api_key
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(key + "\n")
    return key, path


def reset_page_enabled(settings: Settings, *, embedded: bool) -> bool:
    """The stand-in reset page: on the embedded default, where the reset link's default points at it;
    with DATABASE_URL only when AUTHLEDGER_DEV_RESET_PAGE says so."""
    return embedded or settings.dev_reset_page


def _route_uvicorn_logs() -> None:
    """uvicorn's own lines in authledger's format; our per-request line replaces its access log."""
    ours = logging.getLogger("authledger")
    for name in ("uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = ours.handlers
        logger.setLevel(logging.INFO)
        logger.propagate = False


def serve(app: App, *, host: str, port: int, inflight: int, say: Callable[[str], None]) -> None:
    """Run until SIGTERM or SIGINT, then stop the API and the workers and return."""
    stop_on_sigterm()  # until uvicorn takes over: a SIGTERM during start-up exits cleanly
    configure_logging(app.settings.log_format)
    _route_uvicorn_logs()
    app = App(app.settings, database=app.database, pool_size=API_POOL_SIZE)
    try:
        _serve(app, host=host, port=port, inflight=inflight, say=say)
    finally:
        app.close()


def _serve(app: App, *, host: str, port: int, inflight: int, say: Callable[[str], None]) -> None:
    settings, base = app.settings, f"http://{host}:{port}"
    lines = [f"authledger API on {base} (OpenAPI document at {base}/openapi.json, interactive at {base}/docs)"]
    if app.database.embedded:
        init_schema(app.admin_engine)
        lines.append(f"database: embedded PostgreSQL in {(settings.data_dir / 'pgdata').resolve()}")
    else:
        lines.append(f"database: {app.database.display_url}")
    app.check_keys()  # refuse to start, rather than answer every request with an error
    ctx = app.services
    if settings.provider == "maildir":
        lines.append(f"mail: delivered to the Maildir {settings.maildir_path.resolve()} (one file per email in new/)")
    else:
        lines.append(f"mail: sent through the {settings.provider} provider")
    lines.append(f"delivery: up to {inflight} sends in flight" if inflight else "delivery: off (--inflight 0)")
    if app.database.embedded:
        key, path = ensure_dev_key(app)
        lines += [f"development API key (for local use only; also in {path.resolve()}):", f"  {key}"]
    reset_page = reset_page_enabled(settings, embedded=app.database.embedded)
    if reset_page:
        lines.append(f"development reset page (a stand-in for your application's): {base}/reset")
    say("\n".join(lines))

    worker = None
    if inflight:
        worker = Worker(ctx, app.mailer, sender=settings.sender, inflight=inflight, poll_seconds=settings.poll_seconds)
    catch_up = CatchUpRunner(app.engine, poll_seconds=settings.poll_seconds)
    config = uvicorn.Config(
        create_app(ctx, worker=worker, catch_up=catch_up, reset_page=reset_page,
                   console=Console(ctx, idle=timedelta(minutes=settings.console_idle_minutes),
                                   signing_key=lambda: signing_key(settings))),
        host=host, port=port, log_config=None, access_log=False, lifespan="on", timeout_graceful_shutdown=10,
        server_header=False,
    )
    server = uvicorn.Server(config)

    def stop(signum: int, frame: FrameType | None) -> None:
        # Before uvicorn installs its handlers, and again when it re-raises
        # the signal after its graceful shutdown: ask it to stop, never die.
        server.should_exit = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.run()
    finally:
        catch_up.stop()  # uvicorn exits without a lifespan shutdown when it cannot bind
        if worker is not None:
            worker.stop()
