"""The HTTP application: the API, admin, pages and console routes under one Starlette app.

``create_app`` composes the handlers (``infra.http.api``, ``infra.http.admin``,
``infra.http.pages``) and the console, wraps them in ``RequestContext``
(``infra.http.request_context``) and installs the exception handlers: every
error becomes a problem+json response in ``infra.http.problems``; anything
unexpected is logged with its traceback and answered with a bare 500. Its
lifespan runs the background loops (delivery worker, catch-up runner).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from anyio import to_thread
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from domain.errors import AuthledgerError, InvalidInput
from infra.console.app import Console
from infra.delivery.worker import Worker
from infra.http.admin import Admin, admin_routes
from infra.http.api import Api
from infra.http.deadlines import BODY_SECONDS, BodyDeadline
from infra.http.methods import allowed_methods
from infra.http.pages import docs_routes, reset_page_routes
from infra.http.provider_events import ProviderEvents, ProviderWebhooks, provider_routes
from infra.http.problems import MethodNotAllowed, RouteNotFound, problem_response
from infra.http.request_context import RequestContext
from infra.http.support import Support, support_routes
from infra.http.validation import MAX_BODY_BYTES
from infra.logs import log_event
from infra.services.unit_of_work import ServiceContext

log = logging.getLogger("authledger.http")


def create_app(
    ctx: ServiceContext, *, worker: Worker | None = None, catch_up: Background | None = None,
    closed_counts: Background | None = None, max_body_bytes: int = MAX_BODY_BYTES, reset_page: bool = False,
    console: Console | None = None, threads: int | None = None, body_seconds: float = BODY_SECONDS,
    webhooks: ProviderWebhooks | None = None, bounces: Background | None = None,
) -> Starlette:
    """The API over ``ctx``, and the review console at /console; ``worker``, ``catch_up`` and
    ``closed_counts`` run in threads.

    ``/docs`` is always served; the development reset page (``infra.http.pages``) with ``reset_page``.
    ``threads``: how many requests run at once in the threadpool (anyio's default, 40, without).
    ``body_seconds``: how long a request's body may take to arrive (``infra.http.deadlines``).
    ``webhooks``: the proofs the Postmark and SendGrid routes check (none: they refuse every post).
    ``bounces``: a watcher of the bounce Maildir (``infra.feedback.bounce_mailbox``), run in a thread too.
    """
    api = Api(ctx, max_body_bytes=max_body_bytes, worker=worker)
    console = console or Console(ctx)
    admin = Admin(api)
    support = Support(api)

    async def on_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, AuthledgerError)
        if error.http_status >= 500:  # the client is told little; the operator gets the whole message
            log_event(log, "request failed", logging.ERROR, problem=error.problem_type, error=error.message,
                      request_id=request.state.request_id)
        return problem_response(error, now=ctx.clock.now(),
                                idempotency_key_given="idempotency-key" in request.headers)

    async def on_http_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        if error.status_code == 405:
            # Every method of the path, not only those of the route that happened to match first.
            allowed = ", ".join(allowed_methods(request.app.routes, request.scope["path"], request.method))
            return problem_response(MethodNotAllowed(f"{request.method} is not allowed here; use {allowed}"),
                                    headers={"Allow": allowed})
        if error.status_code == 404:
            return problem_response(RouteNotFound(f"no resource at {request.url.path}"))
        return problem_response(InvalidInput(str(error.detail)))

    routes = [
        Route("/v1/password-resets", api.create_reset, methods=["POST"]),
        Route("/v1/password-resets/verify", api.verify_reset, methods=["POST"]),
        Route("/v1/password-resets/consume", api.consume_reset, methods=["POST"]),
        Route("/v1/otp/challenges", api.create_challenge, methods=["POST"]),
        Route("/v1/otp/challenges/{challenge_id}/verify", api.verify_challenge, methods=["POST"]),
        Route("/v1/timeline", api.timeline, methods=["GET"]),
        *admin_routes(admin),
        *provider_routes(ProviderEvents(api, webhooks or ProviderWebhooks())),
        Route("/v1/users/{user_id}/erasure", api.erase_user, methods=["POST"]),
        *support_routes(support),
        Route("/healthz", api.healthz, methods=["GET"]),
        Route("/readyz", api.readyz, methods=["GET"]),
        Route("/metrics", api.metrics, methods=["GET"]),
        Route("/openapi.json", api.openapi, methods=["GET"]),
        *docs_routes(),
        *(reset_page_routes(ctx) if reset_page else []),
        console.mount(),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(RequestContext), Middleware(BodyDeadline, seconds=body_seconds)],
        exception_handlers={AuthledgerError: on_error, HTTPException: on_http_error},
        lifespan=_lifespan(api, [part for part in (worker, catch_up, closed_counts, bounces) if part is not None],
                           threads),
    )


class Background(Protocol):
    """A loop that runs beside the API for its lifetime: the delivery worker, the catch-up runner, the counts
    writer."""

    def run(self) -> None: ...

    def stop(self) -> None: ...


def _lifespan(
    api: Api, background: list[Background], request_threads: int | None
) -> Callable[[Starlette], contextlib.AbstractAsyncContextManager[None]]:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if request_threads is not None:
            to_thread.current_default_thread_limiter().total_tokens = request_threads
        try:
            await run_in_threadpool(api.start_metrics)
        except AuthledgerError as error:  # the database may come up later; /readyz says so meanwhile
            log_event(log, "metrics will start at the first scrape", logging.WARNING, error=error.message)
        threads = [threading.Thread(target=part.run, name=f"authledger-{type(part).__name__}", daemon=True)
                   for part in background]
        for thread in threads:
            thread.start()
        try:
            yield
        finally:
            # The worker finishes the message in hand and gives back the rest of
            # its batch; the runner finishes its batch and keeps its checkpoint.
            for part in background:
                part.stop()
            for thread in threads:
                await run_in_threadpool(thread.join, 30.0)

    return lifespan
