"""`authledger serve`: the HTTP API and the delivery workers in one process, or the API in several.

uvicorn runs the app; the app's lifespan runs the delivery worker in a
thread, so one SIGTERM or Ctrl-C stops both: uvicorn stops accepting,
finishes the requests in hand, then the worker finishes its sends in flight
and gives back what it claimed and had not started. With ``--processes N``
this process supervises N such API processes on one port, the first of
them with the worker, the catch-up runner and the writer of closed flood
counts (``serve_processes``). On the embedded default the database is
initialised on start and a development API key (every scope, default
tenant) is made (once) and printed.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import multiprocessing
import multiprocessing.connection
import multiprocessing.process
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from types import FrameType

import attrs
import uvicorn
from attrs import frozen
from sqlalchemy import text

from domain.clients import SCOPES
from domain.errors import ConfigError, NotFound
from infra.bootstrap import App, stop_on_sigterm
from infra.config.settings import Settings
from infra.db.engine import Database
from infra.db.reading import reading
from infra.errors import ApiProcessExited, PortUnavailable
from infra.http.app import create_app
from infra.feedback.bounce_mailbox import BounceMailboxWatcher
from infra.http.provider_events import provider_webhooks
from infra.http.deadlines import DeadlineProtocol
from infra.http.parent_watch import follow_parent
from infra.console.app import Console
from infra.audit.digest import signing_key
from infra.services.clients import authenticate, create_client, revoke_client
from infra.logs import configure_logging, log_event
from infra.db.schema import init_schema
from infra.db.leadership import CATCH_UP, CLOSED_COUNTS, LeaderOnly, this_holder
from infra.projector.catchup import CatchUpRunner
from infra.services.closed_counts import ClosedCountsWriter
from infra.delivery.providers.maildir import make_maildir
from infra.delivery.worker import Worker

log = logging.getLogger("authledger.serve")

DEV_CLIENT = "dev"
DEV_KEY_FILE = "dev-api-key"
SERVE_METADATA = {"actor": "authledger serve", "client": "cli", "command": "serve"}
# Requests run in a threadpool, each holding at most one connection at a time.
# The pool keeps a connection for every request thread and a few for the
# catch-up runner and the delivery worker: a thread beyond what the pool keeps
# makes it open a connection (a new backend) and close it again on return,
# request after request, and each new connection parses its statements anew.
API_THREADS = 16
API_POOL_SIZE = API_THREADS + 4
# The connections the database lets a role without superuser rights open.
CONNECTIONS_ALLOWED = text("""
    SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int
           - coalesce(current_setting('reserved_connections', true)::int, 0)
""")
# How long ``serve --processes`` waits for its API processes after SIGTERM before it kills them: uvicorn's
# graceful shutdown (10 s), then the worker's sends in flight.
STOP_GRACE_SECONDS = 60.0


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


def serve(app: App, *, host: str, port: int, inflight: int, say: Callable[[str], None], processes: int = 1) -> None:
    """Run until SIGTERM or SIGINT, then stop the API and the workers and return.

    With ``processes`` above 1, that many API processes share the port (see
    ``serve_processes``); this process only supervises them.
    """
    stop_on_sigterm()  # until uvicorn takes over: a SIGTERM during start-up exits cleanly
    configure_logging(app.settings.log_format)
    _route_uvicorn_logs()
    app = App(app.settings, database=app.database, pool_size=API_POOL_SIZE)
    try:
        check_connections_fit(app, processes)
        lines, reset_page = _prepare(app, host=host, port=port, inflight=inflight)
        if processes == 1:
            # Bound here rather than by uvicorn: a port in use is refused as with several processes (exit 69).
            with port_socket(host, port, shared=False) as listener:
                say("\n".join(lines))
                _run(app, inflight=inflight, reset_page=reset_page, host=host, port=port, sockets=[listener])
            return
        app.close()  # the supervisor holds no connections; each API process opens its own pool
        lines.append(f"processes: {processes} API processes; the first also runs delivery, the catch-up runner "
                     "and the closed-counts writer")
        serve_processes(ApiProcess(app.settings, app.database, inflight, reset_page), host=host, port=port,
                        processes=processes, announce=lambda: say("\n".join(lines)))
    finally:
        app.close()


def check_connections_fit(app: App, processes: int) -> None:
    """Refuse, before anything is written, more API processes than the database has connections for.

    Each process's pool grows to ``API_POOL_SIZE`` under load; beyond what the
    server allows, requests would fail with "too many clients" only then. Read
    through an engine of its own, closed at once, so that no idle connection
    outlives the check (before the schema exists, so not as the app role).
    """
    engine = app.database.admin_engine()
    try:
        with reading(engine) as connection:
            allowed = connection.execute(CONNECTIONS_ALLOWED).scalar_one()
    finally:
        engine.dispose()
    wanted = processes * API_POOL_SIZE
    if wanted > allowed:
        fewer = (f"run at most {allowed // API_POOL_SIZE} (--processes or AUTHLEDGER_API_PROCESSES)"
                 if allowed >= API_POOL_SIZE else "raise the database's max_connections")
        raise ConfigError(f"{processes} API processes would keep up to {wanted} database connections "
                          f"({API_POOL_SIZE} each), and the database allows {allowed} (max_connections, less "
                          f"those reserved for superusers): {fewer}")


def _prepare(app: App, *, host: str, port: int, inflight: int) -> tuple[list[str], bool]:
    """Initialise the embedded database, check the keys, make the dev key: what to print, and the reset page's flag."""
    settings, base = app.settings, f"http://{host}:{port}"
    lines = [f"authledger API on {base} (OpenAPI document at {base}/openapi.json, interactive at {base}/docs)"]
    if app.database.embedded:
        init_schema(app.admin_engine)
        lines.append(f"database: embedded PostgreSQL in {(settings.data_dir / 'pgdata').resolve()}")
    else:
        lines.append(f"database: {app.database.display_url}")
    app.check_keys()  # refuse to start, rather than answer every request with an error
    if settings.provider == "maildir":
        make_maildir(settings.maildir_path)  # here, before anything runs: a folder that cannot be made is refused
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
    return lines, reset_page


def _run(app: App, *, inflight: int, reset_page: bool, host: str, port: int,
         sockets: list[socket.socket] | None = None, background: bool = True) -> bool:
    """Serve the API until told to stop; with ``background``, the catch-up runner, the writer of closed flood
    counts and (when ``inflight``) the delivery worker beside it.

    ``sockets``: listen on these instead of binding ``host``:``port``. True if the server started.
    """
    settings, ctx = app.settings, app.services
    worker = catch_up = closed_counts = None
    if background and inflight:
        worker = Worker(ctx, app.mailer, sender=settings.sender, inflight=inflight, poll_seconds=settings.poll_seconds,
                        outcomes=app.outcomes_engine)
    if background:
        # Once across every serve process on every host: whichever holds the role's lock (infra.db.leadership).
        holder = this_holder(settings.host_name)
        catch_up = LeaderOnly(app.engine, CATCH_UP, holder=holder,
                              make_part=lambda: CatchUpRunner(app.engine, poll_seconds=settings.poll_seconds))
        closed_counts = LeaderOnly(app.engine, CLOSED_COUNTS, holder=holder,
                                   make_part=lambda: ClosedCountsWriter(ctx, metadata=SERVE_METADATA))
    bounces = (BounceMailboxWatcher(ctx, settings.bounce_maildir, metadata=SERVE_METADATA)
               if background and settings.bounce_maildir is not None else None)
    config = uvicorn.Config(
        create_app(ctx, worker=worker, catch_up=catch_up, closed_counts=closed_counts, reset_page=reset_page,
                   threads=API_THREADS, body_seconds=settings.http_body_timeout,
                   console=Console(ctx, idle=timedelta(minutes=settings.console_idle_minutes),
                                   signing_key=lambda: signing_key(settings)),
                   webhooks=provider_webhooks(settings), bounces=bounces),
        host=host, port=port, log_config=None, access_log=False, lifespan="on", timeout_graceful_shutdown=10,
        server_header=False, loop="uvloop",
        # httptools, the C parser (see pyproject.toml), with deadlines for slow clients: infra.http.deadlines.
        http=DeadlineProtocol.with_deadlines(header_seconds=settings.http_header_timeout,
                                             body_seconds=settings.http_body_timeout),
    )
    server = uvicorn.Server(config)

    def stop(signum: int, frame: FrameType | None) -> None:
        # Before uvicorn installs its handlers, and again when it re-raises
        # the signal after its graceful shutdown: ask it to stop, never die.
        server.should_exit = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # What the process keeps for its lifetime (modules, the app, SQLAlchemy's and psycopg's machinery) is moved
    # out of the collector's way: each full collection scanned it all, stopping every request for 60-150 ms
    # under load (bench/RESULTS.md, "Full garbage collections").
    gc.collect()
    gc.freeze()
    try:
        server.run(sockets=sockets)
    finally:
        for part in (catch_up, closed_counts):
            if part is not None:
                part.stop()  # uvicorn exits without a lifespan shutdown when it cannot bind
        if worker is not None:
            worker.stop()
    return server.started


# -- several API processes ------------------------------------------------------------------------------


@frozen
class ApiProcess:
    """What an API process needs, handed to it by the supervisor (pickled: settings are plain data)."""

    settings: Settings
    database: Database  # located by the supervisor: an embedded server is started once, there
    inflight: int
    reset_page: bool
    background: bool = False  # the delivery worker, the catch-up runner, the counts writer: the first process only


def serve_processes(plan: ApiProcess, *, host: str, port: int, processes: int,
                    announce: Callable[[], None]) -> None:
    """Run ``processes`` API processes on one port until SIGTERM or SIGINT; stop them all.

    Each process listens on a socket of its own, bound with SO_REUSEPORT, and
    the kernel spreads new connections over them by their addresses. With one
    socket shared instead, whichever process woke first accepted every
    connection waiting: a client opening its pool of keep-alive connections
    at once had them all on one process, and a second process served nothing
    (bench/api.py: 16 connections, 16 on one process). The price: a process
    that stalls keeps its share of new connections waiting until it runs
    again. The supervisor first binds the port alone, without SO_REUSEPORT:
    that fails if anything holds it, another ``serve`` included, which would
    otherwise share the port unnoticed.

    Processes are spawned, not forked: each builds its own engine and pool
    from nothing. The first process also runs the delivery worker, the
    catch-up runner and the counts writer, so there is one delivery window
    and one provider connection pool as with one process (running them in
    every process would be safe too: leases and checkpoints are claimed with
    SKIP LOCKED, counts written under their stream's lock; it would only
    multiply the window). A process that exits on its own stops the others:
    ``ApiProcessExited``, for the service manager to restart the whole. One
    that has not stopped ``STOP_GRACE_SECONDS`` after SIGTERM is killed. A
    supervisor killed outright takes them with it (``infra.http.parent_watch``).
    """
    with port_socket(host, port, shared=False) as alone:
        port = alone.getsockname()[1]  # the one chosen, when asked for port 0
    spawn = multiprocessing.get_context("spawn")
    children: list[multiprocessing.process.BaseProcess] = [
        spawn.Process(target=run_api_process, name=f"authledger-api-{index}",
                      args=(attrs.evolve(plan, background=index == 0), host, port))
        for index in range(processes)]
    started: list[multiprocessing.process.BaseProcess] = []
    stop_by: list[float] = []  # when the stop began: the grace period's end

    def stop(signum: int, frame: FrameType | None) -> None:
        if not stop_by:
            stop_by.append(time.monotonic() + STOP_GRACE_SECONDS)
        for child in started:
            if child.exitcode is None and child.pid is not None:  # never signal a pid already reaped
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    failed = None
    try:
        for index, child in enumerate(children):
            if stop_by:
                break
            child.start()
            started.append(child)
            log_event(log, "api process started", index=index, pid=child.pid,
                      background="delivery and catch-up" if index == 0 else None)
        announce()
        while live := [child for child in started if child.exitcode is None]:
            timeout = max(0.0, stop_by[0] - time.monotonic()) if stop_by else None
            ready = multiprocessing.connection.wait([child.sentinel for child in live], timeout)
            if not ready:
                for child in live:  # the grace period is over
                    log_event(log, "api process killed", logging.WARNING, pid=child.pid,
                              after_seconds=STOP_GRACE_SECONDS)
                    child.kill()
                    child.join()
            for child in (child for child in live if child.sentinel in ready):
                # The sentinel closes a moment before the exit status can be read: wait for the status.
                child.join()
                if failed is None and not stop_by:
                    failed = child
                    stop(signal.SIGTERM, None)
    finally:
        stop(signal.SIGTERM, None)
        for child in started:
            child.join()
    if failed is not None:
        raise ApiProcessExited(f"API process {children.index(failed)} (pid {failed.pid}) exited with "
                               f"{failed.exitcode}; the others were stopped")


def port_socket(host: str, port: int, *, shared: bool = True) -> socket.socket:
    """A TCP socket bound to ``host``:``port``; ``shared``: with SO_REUSEPORT, so that each API process binds one."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if shared:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise PortUnavailable(f"cannot listen on {host}:{port}: {error.strerror}") from error
    return sock


def run_api_process(plan: ApiProcess, host: str, port: int) -> None:
    """One API process: its own engine and pool, and its own socket on the shared port, until SIGTERM
    or until the supervisor ends, however it ends."""
    stop_on_sigterm()
    follow_parent(grace_seconds=STOP_GRACE_SECONDS)
    configure_logging(plan.settings.log_format)
    _route_uvicorn_logs()
    try:
        listener = port_socket(host, port)
    except PortUnavailable as error:  # taken since the supervisor found it free
        log_event(log, str(error), logging.ERROR)
        sys.exit(3)
    app = App(plan.settings, database=plan.database, pool_size=API_POOL_SIZE)
    try:
        app.check_keys(announce=False)  # serve said it once for all
        started = _run(app, inflight=plan.inflight, reset_page=plan.reset_page, host="", port=0,
                       sockets=[listener], background=plan.background)
    finally:
        app.close()
    if not started:
        sys.exit(3)  # as uvicorn's own: the lifespan or the server failed to start
