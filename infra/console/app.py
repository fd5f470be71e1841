"""The review console at ``/console``: server-rendered pages over the one lookup, for a `review` key.

``Console.routes`` is the list of pages; ``NAV`` names them in the header.
The outbox page (``infra.console.outbox``) and the audit page
(``infra.console.audit``) are built from the same parts as the rest: a
session, its CSRF token, templates.

Every page is rendered on the server from Jinja2 templates in this package;
the only script is ``static/console.js`` (no inline script, no CDN), and
``SecurityHeaders`` sends a Content-Security-Policy that allows nothing else.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route, Router
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from domain.clients import Caller
from domain.errors import ConfigError, InvalidInput, NotFound
from domain.privacy import erasure_reason, subject_of
from infra.audit.export import export_case
from infra.console import svg
from infra.console.cases import KINDS, AddressIndex, Case, find_case, search
from infra.console.sessions import COOKIE, DEFAULT_IDLE, SIGN_IN_COOKIE, Session, Sessions, new_token, same_token
from infra.audit.background import VerificationRunner, digest_download, seal_state
from infra.console.outbox import LISTS, message_of_tenant, outbox_view
from infra.delivery.redrive import Selection, redrive
from infra.errors import NothingSealed, TamperDetected
from infra.services.address_index import users_by_address
from infra.services.clients import authenticate
from infra.services.privacy import erase_user, preview
from infra.services.unit_of_work import ServiceContext
from projections.timeline import format_time

PREFIX = "/console"
SCOPE = "review"
ADMIN = "admin"  # what a session's key needs to act (re-drive, erase), beyond reading
MAX_FORM_BYTES = 16 * 1024
STATIC = Path(__file__).parent / "static"
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; object-src 'none'; "
       "base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]
# Why a session ended, as the sign-in page tells it (the query names one of these, never free text).
ENDED = {
    "idle": "Your session ended after a while without activity. Sign in again.",
    "revoked": "Your session ended: its API key no longer works.",
    "scope": "Your session ended: its API key no longer holds the review scope.",
    "signed-out": "You are signed out.",
}
NOTHING_FOUND = "Nothing found."
Authenticate = Callable[[Any, str], Caller | None]
SigningKey = Callable[[], Ed25519PrivateKey]
ERASED = {"erased": "Erased: the user's data key is destroyed, so their addresses read [erased] from now on; the "
                     "erasure is recorded with your client's name and reason."}
NOT_ERASED_AGAIN = "Already erased at {at}, with nothing left to destroy: nothing changed."
NEEDS_ADMIN_TO_ERASE = "Erasing a user needs an API key with the admin scope; this session's key has only review."
REDRIVEN = {"redriven": "Re-driven: the message is queued again, due now, and the re-drive is recorded with "
                        "your client's name and reason."}
# A verification's state, in the page's words.
OUTCOMES = {"running": "running", "ok": "intact", "tampered": "tampered", "nothing sealed": "nothing sealed yet",
            "failed": "failed"}
NO_DIGEST_KEY = ("This server has no audit signing key (AUTHLEDGER_SIGNING_KEY or AUTHLEDGER_SIGNING_KEY_FILE), "
                 "so it cannot sign a digest.")
NO_SIGNING_KEY = ("This server has no audit signing key (AUTHLEDGER_SIGNING_KEY or AUTHLEDGER_SIGNING_KEY_FILE), "
                  "so it cannot sign a download of the case.")


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


class Console:
    """The console's pages, bound to one ``ServiceContext``.

    ``authenticate`` answers who holds a key (``infra.services.clients.authenticate``);
    ``address_index`` finds the users of an email address (default: the HMAC index over ``ctx``'s keys).
    ``signing_key`` loads the audit signing key that signs a case's download and the audit digest
    (none: no download). ``verification`` runs the audit page's chain verifications, one at a time.
    """

    def __init__(self, ctx: ServiceContext, *, idle: timedelta = DEFAULT_IDLE,
                 authenticate: Authenticate = authenticate, address_index: AddressIndex | None = None,
                 signing_key: SigningKey | None = None, verification: VerificationRunner | None = None) -> None:
        self.ctx = ctx
        self.signing_key = signing_key
        self.sessions = Sessions(ctx.clock, idle)
        self.authenticate = authenticate
        self.address_index: AddressIndex = address_index or (
            lambda tenant, address: users_by_address(ctx, tenant, address))
        self.verification = verification or VerificationRunner(ctx.engine, clock=ctx.clock)
        self.templates = Environment(loader=PackageLoader("infra.console", "templates"),
                                     autoescape=select_autoescape(["html"]))
        self.nav: list[tuple[str, str]] = [("Search", f"{PREFIX}/"), ("Outbox", f"{PREFIX}/outbox"),
                                           ("Audit", f"{PREFIX}/audit")]
        self.routes: list[BaseRoute] = [
            Route("/", self.search_page, methods=["GET"]),
            Route("/search", self.search, methods=["POST"]),
            Route("/case", self.case_page, methods=["GET"]),
            Route("/case.jsonl", self.case_download, methods=["GET"]),
            Route("/case/erase", self.case_erase, methods=["POST"]),
            Route("/sign-in", self.sign_in_page, methods=["GET"]),
            Route("/sign-in", self.sign_in, methods=["POST"]),
            Route("/sign-out", self.sign_out, methods=["POST"]),
            Route("/outbox", self.outbox_page, methods=["GET"]),
            Route("/outbox/redrive", self.outbox_redrive, methods=["POST"]),
            Route("/audit", self.audit_page, methods=["GET"]),
            Route("/audit/verify", self.audit_verify, methods=["POST"]),
            Route("/audit/verification.json", self.audit_verification, methods=["GET"]),
            Route("/audit/digest.json", self.audit_digest, methods=["GET"]),
            Mount("/static", StaticFiles(directory=STATIC), name="console-static"),
        ]

    def mount(self) -> Mount:
        """The console under ``/console``, with its headers on every answer."""
        return Mount(PREFIX, app=SecurityHeaders(Router(routes=self.routes)))

    # -- rendering ------------------------------------------------------------------------------

    def render(self, name: str, status: int = 200, session: Session | None = None, **context: Any) -> HTMLResponse:
        page = self.templates.get_template(name).render(
            nav=self.nav, prefix=PREFIX, session=session, client=session.caller.client if session else None,
            tenant=session.caller.tenant if session else None, **context)
        return HTMLResponse(page, status_code=status)

    # -- sessions -------------------------------------------------------------------------------

    async def _session(self, request: Request) -> Session | Response:
        """The signed-in session, its key checked again now; or the redirect to the sign-in page."""
        cookie = request.cookies.get(COOKIE)
        session, went_idle = self.sessions.find(cookie)
        if session is None:
            return self._to_sign_in(request, "idle" if went_idle else None)
        caller = await run_in_threadpool(self.authenticate, self.ctx.engine, session.api_key)
        if caller is None or not caller.may(SCOPE):
            self.sessions.close(cookie)
            return self._to_sign_in(request, "revoked" if caller is None else "scope")
        request.state.client = caller.client  # for the request's log line
        if caller != session.caller:
            assert cookie is not None
            self.sessions.replace_caller(cookie, caller)
            session = Session(session.api_key, caller, session.csrf, session.last_seen)
        return session

    def _to_sign_in(self, request: Request, ended: str | None) -> Response:
        target = f"{PREFIX}/sign-in" + (f"?ended={ended}" if ended else "")
        response = RedirectResponse(target, status_code=303)
        if ended:
            response.delete_cookie(COOKIE, path=PREFIX)
        return response

    async def _form(self, request: Request) -> dict[str, str] | None:
        """The posted form's text fields; None when it is too big or not a form."""
        declared = request.headers.get("content-length")
        if declared is None or not declared.isdigit() or int(declared) > MAX_FORM_BYTES:
            return None
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
            return None
        form = await request.form(max_files=0, max_fields=20)
        return {name: value for name, value in form.items() if isinstance(value, str)}

    def _refused(self, message: str, status: int, session: Session | None = None) -> HTMLResponse:
        return self.render("refused.html", status, session, heading="Not done", message=message)

    # -- sign-in and sign-out -------------------------------------------------------------------

    async def sign_in_page(self, request: Request) -> Response:
        ended = ENDED.get(request.query_params.get("ended", ""))
        return self._sign_in_form(request, notice=ended)

    def _sign_in_form(self, request: Request, *, notice: str | None = None, error: str | None = None,
                      status: int = 200) -> Response:
        token = new_token()
        response = self.render("sign_in.html", status, csrf=token, notice=notice, error=error)
        response.set_cookie(SIGN_IN_COOKIE, token, path=f"{PREFIX}/sign-in", httponly=True, samesite="strict",
                            secure=request.url.scheme == "https", max_age=3600)
        return response

    async def sign_in(self, request: Request) -> Response:
        form = await self._form(request)
        if form is None or not same_token(form.get("csrf"), request.cookies.get(SIGN_IN_COOKIE, "")) \
                or not request.cookies.get(SIGN_IN_COOKIE):
            return self._sign_in_form(request, error="The sign-in form had expired. Please try again.", status=403)
        api_key = form.get("api_key", "").strip()
        if not api_key or len(api_key) > 512:
            return self._sign_in_form(request, error="Enter an API key.", status=400)
        caller = await run_in_threadpool(self.authenticate, self.ctx.engine, api_key)
        if caller is None:
            return self._sign_in_form(request, error="That API key is unknown or revoked.", status=401)
        if not caller.may(SCOPE):
            return self._sign_in_form(
                request, status=403,
                error="That API key lacks the review scope: the console needs a key with the review scope.")
        response = RedirectResponse(f"{PREFIX}/", status_code=303)
        response.set_cookie(COOKIE, self.sessions.open(api_key, caller), path=PREFIX, httponly=True,
                            samesite="strict", secure=request.url.scheme == "https")
        response.delete_cookie(SIGN_IN_COOKIE, path=f"{PREFIX}/sign-in")
        return response

    async def sign_out(self, request: Request) -> Response:
        session = await self._session(request)
        if isinstance(session, Response):
            return session
        form = await self._form(request)
        if form is None or not same_token(form.get("csrf"), session.csrf):
            return self._refused("This form had expired. Reload the page and try again.", 403, session)
        self.sessions.close(request.cookies.get(COOKIE))
        return self._to_sign_in(request, "signed-out")

    # -- search and cases -----------------------------------------------------------------------

    async def search_page(self, request: Request) -> Response:
        session = await self._session(request)
        if isinstance(session, Response):
            return session
        return self.render("search.html", 200, session, csrf=session.csrf, nothing=None)

    async def search(self, request: Request) -> Response:
        session = await self._session(request)
        if isinstance(session, Response):
            return session
        form = await self._form(request)
        if form is None or not same_token(form.get("csrf"), session.csrf):
            return self._refused("This form had expired. Reload the page and try again.", 403, session)
        query = form.get("q", "")
        found = await run_in_threadpool(search, self.ctx.engine, session.caller.tenant, query,
                                        address_index=self.address_index) if len(query) <= 320 else None
        if found is None:  # the same answer for unknown ids and other tenants' ids; a search that found nothing
            return self.render("search.html", 200, session, csrf=session.csrf, nothing=NOTHING_FOUND)
        if isinstance(found, list):  # an address several users had: the reviewer chooses
            return self.render("search.html", 200, session, csrf=session.csrf, nothing=None, users=found)
        kind, value = found
        return RedirectResponse(f"{PREFIX}/case?{urlencode({'kind': kind, 'id': value})}", status_code=303)

    async def case_page(self, request: Request) -> Response:
        session = await self._session(request)
        if isinstance(session, Response):
            return session
        kind, value = request.query_params.get("kind", ""), request.query_params.get("id", "")
        case = None
        if kind in KINDS and value:
            case = await run_in_threadpool(find_case, self.ctx.engine, session.caller.tenant, kind, value,
                                           now=self.ctx.clock.now())
        if case is None:
            return self.render("search.html", 404, session, csrf=session.csrf, nothing=NOTHING_FOUND)
        return self._case(session, case, notice=ERASED.get(request.query_params.get("done", "")))

    def _case(self, session: Session, case: Case, *, status: int = 200, notice: str | None = None,
              error: str | None = None) -> Response:
        return self.render("case.html", status, session, csrf=session.csrf, admin=session.caller.may(ADMIN),
                           notice=notice, error=error, **_case_context(case))

    async def case_erase(self, request: Request) -> Response:
        """Erase the case's user, an admin action in two steps: the reason, then a confirmation of what goes.

        The erasure is ``erase_user``'s, as ``POST /v1/users/{user_id}/erasure`` does it: the caller's
        tenant's user, recorded with the key's client in the event's metadata.
        """
        session = await self._session(request)
        if isinstance(session, Response):
            return session
        form = await self._form(request)
        if form is None or not same_token(form.get("csrf"), session.csrf):
            return self._refused("This form had expired. Reload the page and try again.", 403, session)
        if not session.caller.may(ADMIN):
            return self._refused(NEEDS_ADMIN_TO_ERASE, 403, session)
        user_id = form.get("user_id", "")
        case = await run_in_threadpool(find_case, self.ctx.engine, session.caller.tenant, "user", user_id,
                                       now=self.ctx.clock.now())
        if case is None:
            return self.render("search.html", 404, session, csrf=session.csrf, nothing=NOTHING_FOUND)
        try:
            reason = erasure_reason(form.get("reason", ""))
        except InvalidInput as refused:
            return self._case(session, case, status=400, error=f"Not erased: {refused.message}.")
        if form.get("confirm") != "yes":  # the first step: say what would go, and ask
            found = await run_in_threadpool(preview, self.ctx, subject_of(session.caller.tenant, user_id))
            return self.render("erase.html", 200, session, csrf=session.csrf, heading=f"Erase user {user_id}?",
                               user_id=user_id, reason=reason, preview=found,
                               erased_at=format_time(found.erased_at) if found.erased_at else None)
        try:
            erasure = await run_in_threadpool(erase_user, self.ctx, session.caller, user_id, reason,
                                              self._metadata(request, session))
        except (InvalidInput, NotFound) as refused:
            return self._case(session, case, status=400 if isinstance(refused, InvalidInput) else 404,
                              error=f"Not erased: {refused.message}.")
        if not erasure.recorded:
            return self._case(session, case, notice=NOT_ERASED_AGAIN.format(at=format_time(erasure.erased_at)))
        return RedirectResponse(f"{PREFIX}/case?{urlencode({'kind': 'user', 'id': user_id, 'done': 'erased'})}",
                                status_code=303)

    def _metadata(self, request: Request, session: Session) -> dict[str, str]:
        """An action's event metadata, as the HTTP API records it: the key's client, and the request's id."""
        client = session.caller.client
        return {"client": client, "actor": f"client:{client}", "request_id": request.state.request_id,
                "correlation_id": request.state.request_id}

    async def case_download(self, request: Request) -> Response:
        """The case as JSON Lines: its events in full, the rest of their stretch of the chain as hashes, signed."""
        session = await self._session(request)
        if isinstance(session, Response):
            return session
        kind, value = request.query_params.get("kind", ""), request.query_params.get("id", "")
        case = None
        if kind in KINDS and value:
            case = await run_in_threadpool(find_case, self.ctx.engine, session.caller.tenant, kind, value,
                                           now=self.ctx.clock.now())
        if case is None:
            return self.render("search.html", 404, session, csrf=session.csrf, nothing=NOTHING_FOUND)
        try:
            key = self.signing_key() if self.signing_key else None
        except ConfigError:
            key = None
        if key is None:
            return self._refused(NO_SIGNING_KEY, 409, session)
        out = io.StringIO()
        try:
            await run_in_threadpool(export_case, self.ctx.engine, key, [r.global_position for r in case.events], out)
        except NotFound as error:
            return self._refused(f"Not downloadable yet: {error.message}.", 409, session)
        return Response(out.getvalue(), media_type="application/x-ndjson", headers={
            "Content-Disposition": f'attachment; filename="authledger-{kind}-case.jsonl"'})


    # -- the outbox -----------------------------------------------------------------------------

    async def outbox_page(self, request: Request) -> Response:
        session = await self._session(request)
        if isinstance(session, Response):
            return session
        return await self._outbox(session, notice=REDRIVEN.get(request.query_params.get("done", "")))

    async def _outbox(self, session: Session, *, status: int = 200, notice: str | None = None,
                      error: str | None = None) -> Response:
        view = await run_in_threadpool(outbox_view, self.ctx.engine, session.caller.tenant, now=self.ctx.clock.now())
        return self.render("outbox.html", status, session, csrf=session.csrf, heading="Outbox",
                           chart=Markup(view.chart), lists=[(key, title, view.lists[key]) for key, title in LISTS],
                           admin=session.caller.may(ADMIN), notice=notice, error=error)

    async def outbox_redrive(self, request: Request) -> Response:
        """Re-drive one abandoned or failed message with a reason: an admin action, recorded with the client."""
        session = await self._session(request)
        if isinstance(session, Response):
            return session
        form = await self._form(request)
        if form is None or not same_token(form.get("csrf"), session.csrf):
            return self._refused("This form had expired. Reload the page and try again.", 403, session)
        if not session.caller.may(ADMIN):
            return self._refused("Re-driving a message needs an API key with the admin scope; this session's key "
                                 "has only review.", 403, session)
        message_id = _uuid(form.get("message_id", ""))
        if message_id is None or not await run_in_threadpool(
                message_of_tenant, self.ctx.engine, session.caller.tenant, message_id):
            return await self._outbox(session, status=404, error="No such message in this tenant's outbox.")
        try:
            await run_in_threadpool(redrive, self.ctx, Selection(message_id=message_id),
                                    reason=form.get("reason", ""), metadata=self._metadata(request, session))
        except (InvalidInput, NotFound) as refused:
            return await self._outbox(session, status=400 if isinstance(refused, InvalidInput) else 404,
                                      error=f"Not re-driven: {refused.message}.")
        return RedirectResponse(f"{PREFIX}/outbox?done=redriven", status_code=303)

    # -- the audit page -------------------------------------------------------------------------

    async def audit_page(self, request: Request) -> Response:
        session = await self._session(request)
        if isinstance(session, Response):
            return session
        sealed = await run_in_threadpool(seal_state, self.ctx.engine)
        status = self.verification.status()
        return self.render("audit.html", 200, session, csrf=session.csrf, heading="Audit", sealed=sealed,
                           last_sealed_at=format_time(sealed.last_sealed_at) if sealed.last_sealed_at else None,
                           verification=status, outcome=OUTCOMES.get(status.state, status.state) if status else None,
                           can_sign=self.signing_key is not None)

    async def audit_verify(self, request: Request) -> Response:
        """Start a chain verification in the background (or join the running one) and go back to the page."""
        session = await self._session(request)
        if isinstance(session, Response):
            return session
        form = await self._form(request)
        if form is None or not same_token(form.get("csrf"), session.csrf):
            return self._refused("This form had expired. Reload the page and try again.", 403, session)
        await run_in_threadpool(self.verification.start)
        return RedirectResponse(f"{PREFIX}/audit", status_code=303)

    async def audit_verification(self, request: Request) -> Response:
        """How the running or last verification stands, for the page's script to show progress."""
        session = await self._session(request)
        if isinstance(session, Response):
            return JSONResponse({"state": "signed-out"}, status_code=401)
        status = self.verification.status()
        if status is None:
            return JSONResponse({"state": "none"})
        return JSONResponse({**status.as_dict(), "outcome": OUTCOMES.get(status.state, status.state)})

    async def audit_digest(self, request: Request) -> Response:
        """A signed digest of the chain head, checked first, as a file."""
        session = await self._session(request)
        if isinstance(session, Response):
            return session
        try:
            key = self.signing_key() if self.signing_key else None
        except ConfigError:
            key = None
        if key is None:
            return self._refused(NO_DIGEST_KEY, 409, session)
        try:
            download = await run_in_threadpool(digest_download, self.ctx.engine, key)
        except (NotFound, NothingSealed, TamperDetected) as refused:
            return self._refused(f"No digest: {refused.message}", 409, session)
        return Response(download.content, media_type=download.media_type, headers={
            "Content-Disposition": f'attachment; filename="{download.filename}"'})


def _case_context(case: Case) -> dict[str, Any]:
    # Addresses as the one lookup gives every reviewer: plain text, or [erased] once the user's key is gone.
    rows = [{"position": e.global_position, "at": format_time(e.at), "event": e.event_type, "client": e.actor or "-",
             "request_id": str(e.request_id) if e.request_id else "-", "address": e.recipient or "",
             "what": e.summary} for e in case.review.timeline]
    return {"case": case, "heading": f"{case.kind.capitalize()} {case.value}",
            "sentences": [f.sentence for f in case.review.findings], "rows": rows,
            "unindexed": case.review.unindexed_events, "picture": Markup(svg.draw(case.events))}


def _uuid(value: str) -> UUID | None:
    try:
        return UUID(value)
    except ValueError:
        return None
