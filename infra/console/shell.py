"""What every console page stands on: the signed-in session, posted forms, templates and security headers.

The page modules (``sign_in_pages``, ``case_pages``, ``outbox_pages``,
``audit_pages``, ``tenant_pages``) each take one ``Shell``; ``infra.console.app`` builds the shell
and the pages and mounts their routes. The shell imports none of them.

A page is a handler of ``(request, session)`` that ``Shell.page`` serves to a
signed-in session; an action is a handler of ``(request, session, form)`` that
``Shell.action`` serves only with the session's CSRF token in the posted form.

Every page is rendered on the server from Jinja2 templates in this package;
the only script is ``static/console.js`` (no inline script, no CDN), and
``SecurityHeaders`` sends a Content-Security-Policy that allows nothing else.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from domain.errors import ConfigError
from infra.console.sessions import COOKIE, Session, Sessions, same_token
from infra.services.clients import authenticate_hash
from infra.services.unit_of_work import ServiceContext

PREFIX = "/console"
SCOPE = "review"
ADMIN = "admin"  # what a session's key needs to act (re-drive, erase), beyond reading
MAX_FORM_BYTES = 16 * 1024
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; object-src 'none'; "
       "base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]
NAV = [("Search", f"{PREFIX}/"), ("Outbox", f"{PREFIX}/outbox"), ("Audit", f"{PREFIX}/audit"),
       ("Tenant", f"{PREFIX}/tenant")]
FORM_EXPIRED = "This form had expired. Reload the page and try again."
SigningKey = Callable[[], Ed25519PrivateKey]
Endpoint = Callable[[Request], Awaitable[Response]]
Page = Callable[[Request, Session], Awaitable[Response]]  # a page for a signed-in session
Action = Callable[[Request, Session, dict[str, str]], Awaitable[Response]]  # and the form it posted


class SecurityHeaders:
    """Adds the console's security headers to every response under it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


class Shell:
    """One ``ServiceContext``'s console sessions and templates, and the steps every page takes with them.

    ``signing_key`` loads the audit signing key that signs a case's download and the audit digest (none: no
    signing). A session's key is checked with ``infra.services.clients.authenticate_hash`` on every request.
    """

    def __init__(self, ctx: ServiceContext, *, idle: timedelta, signing_key: SigningKey | None = None) -> None:
        self.ctx = ctx
        self.can_sign = signing_key is not None
        self._signing_key = signing_key
        self.sessions = Sessions(ctx.engine, ctx.clock, idle)
        self.templates = Environment(loader=PackageLoader("infra.console", "templates"),
                                     autoescape=select_autoescape(["html"]))

    # -- rendering ------------------------------------------------------------------------------

    def render(self, name: str, status: int = 200, session: Session | None = None, **context: Any) -> HTMLResponse:
        page = self.templates.get_template(name).render(
            nav=NAV, prefix=PREFIX, session=session, client=session.caller.client if session else None,
            tenant=session.caller.tenant if session else None, **context)
        return HTMLResponse(page, status_code=status)

    def refused(self, message: str, status: int, session: Session | None = None) -> HTMLResponse:
        return self.render("refused.html", status, session, heading="Not done", message=message)

    # -- sessions and forms ---------------------------------------------------------------------

    async def session(self, request: Request) -> Session | Response:
        """The signed-in session, its key checked again now; or the redirect to the sign-in page."""
        session = await run_in_threadpool(self._signed_in, request.cookies.get(COOKIE))
        if not isinstance(session, Session):
            return self.to_sign_in(session)
        request.state.client = session.caller.client  # for the request's log line, with the key's id
        request.state.key_id = session.caller.key_id
        return session

    def _signed_in(self, cookie: str | None) -> Session | str | None:
        """The session named by ``cookie`` with what its key may do now; else why it ended (None: there was none)."""
        stored, went_idle = self.sessions.find(cookie)
        if stored is None:
            return "idle" if went_idle else None
        caller = authenticate_hash(self.ctx.engine, stored.key_hash)
        if caller is None or not caller.may(SCOPE):
            self.sessions.close(cookie)
            return "revoked" if caller is None else "scope"
        return Session(stored.key_hash, caller, stored.csrf, stored.last_seen)

    def to_sign_in(self, ended: str | None) -> Response:
        target = f"{PREFIX}/sign-in" + (f"?ended={ended}" if ended else "")
        response = RedirectResponse(target, status_code=303)
        if ended:
            response.delete_cookie(COOKIE, path=PREFIX)
        return response

    async def form(self, request: Request) -> dict[str, str] | None:
        """The posted form's text fields; None when it is too big or not a form."""
        declared = request.headers.get("content-length")
        if declared is None or not declared.isdigit() or int(declared) > MAX_FORM_BYTES:
            return None
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
            return None
        form = await request.form(max_files=0, max_fields=20)
        return {name: value for name, value in form.items() if isinstance(value, str)}

    def page(self, handler: Page) -> Endpoint:
        """``handler`` answering a signed-in session; anyone else goes to the sign-in page."""
        async def endpoint(request: Request) -> Response:
            session = await self.session(request)
            if isinstance(session, Response):
                return session
            return await handler(request, session)

        return endpoint

    def action(self, handler: Action) -> Endpoint:
        """``handler`` answering a signed-in session's form, posted with the session's CSRF token; else refused."""
        async def endpoint(request: Request) -> Response:
            session = await self.session(request)
            if isinstance(session, Response):
                return session
            form = await self.form(request)
            if form is None or not same_token(form.get("csrf"), session.csrf):
                return self.refused(FORM_EXPIRED, 403, session)
            return await handler(request, session, form)

        return endpoint

    # -- acting ---------------------------------------------------------------------------------

    def metadata(self, request: Request, session: Session) -> dict[str, str]:
        """An action's event metadata, as the HTTP API records it: the key's client and id, and the request's id."""
        client = session.caller.client
        return {"client": client, "key_id": session.caller.key_id, "actor": f"client:{client}",
                "request_id": request.state.request_id, "correlation_id": request.state.request_id}

    def signing_key(self) -> Ed25519PrivateKey | None:
        """The audit signing key; None when the server has none or cannot load it."""
        try:
            return self._signing_key() if self._signing_key else None
        except ConfigError:
            return None
