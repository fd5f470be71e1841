"""Signing in to the console with an API key that holds the review scope, and signing out."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from infra.console.sessions import COOKIE, SIGN_IN_COOKIE, Session, new_token, same_token
from infra.console.shell import PREFIX, SCOPE, Shell
from infra.services.clients import authenticate

# Why a session ended, as the sign-in page tells it (the query names one of these, never free text).
ENDED = {
    "idle": "Your session ended after a while without activity. Sign in again.",
    "revoked": "Your session ended: its API key no longer works.",
    "scope": "Your session ended: its API key no longer holds the review scope.",
    "signed-out": "You are signed out.",
}


class SignInPages:
    """The sign-in form (its own CSRF cookie, as there is no session yet) and the sign-out button."""

    def __init__(self, shell: Shell) -> None:
        self.shell = shell
        self.routes: list[BaseRoute] = [
            Route("/sign-in", self.sign_in_page, methods=["GET"]),
            Route("/sign-in", self.sign_in, methods=["POST"]),
            Route("/sign-out", shell.action(self.sign_out), methods=["POST"]),
        ]

    async def sign_in_page(self, request: Request) -> Response:
        ended = ENDED.get(request.query_params.get("ended", ""))
        return self._sign_in_form(request, notice=ended)

    def _sign_in_form(self, request: Request, *, notice: str | None = None, error: str | None = None,
                      status: int = 200) -> Response:
        token = new_token()
        response = self.shell.render("sign_in.html", status, csrf=token, notice=notice, error=error)
        response.set_cookie(SIGN_IN_COOKIE, token, path=f"{PREFIX}/sign-in", httponly=True, samesite="strict",
                            secure=request.url.scheme == "https", max_age=3600)
        return response

    async def sign_in(self, request: Request) -> Response:
        form = await self.shell.form(request)
        if form is None or not same_token(form.get("csrf"), request.cookies.get(SIGN_IN_COOKIE, "")) \
                or not request.cookies.get(SIGN_IN_COOKIE):
            return self._sign_in_form(request, error="The sign-in form had expired. Please try again.", status=403)
        api_key = form.get("api_key", "").strip()
        if not api_key or len(api_key) > 512:
            return self._sign_in_form(request, error="Enter an API key.", status=400)
        caller = await run_in_threadpool(authenticate, self.shell.ctx.engine, api_key)
        if caller is None:
            return self._sign_in_form(request, error="That API key is unknown or revoked.", status=401)
        if not caller.may(SCOPE):
            return self._sign_in_form(
                request, status=403,
                error="That API key lacks the review scope: the console needs a key with the review scope.")
        cookie = await run_in_threadpool(self.shell.sessions.open, api_key)
        response = RedirectResponse(f"{PREFIX}/", status_code=303)
        response.set_cookie(COOKIE, cookie, path=PREFIX, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https")
        response.delete_cookie(SIGN_IN_COOKIE, path=f"{PREFIX}/sign-in")
        return response

    async def sign_out(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        await run_in_threadpool(self.shell.sessions.close, request.cookies.get(COOKIE))
        return self.shell.to_sign_in("signed-out")
