"""The HTML pages `serve` adds beside the JSON API: ``/docs`` and the development reset page.

``/docs`` is Swagger UI over ``/openapi.json``. Its assets are vendored by a
package (``swagger-ui-bundle-v2``, Swagger UI 5: OpenAPI 3.1) and served
from it, never from a CDN, under a Content-Security-Policy with no inline
script: the start-up script is a static file of ours (static/docs-init.js).

``/reset`` is a stand-in for the application's own reset page, so that the
link in a reset email works on the embedded default. It shows the token's
state, as the verify service answers it, and consumes the token with a
button. The token arrives in the link's query (``?token=``, what
``AUTHLEDGER_RESET_URL`` gets) and leaves again only in the POST body; the
request log line prints the path alone, never the query or the body. The
form carries a CSRF token, double-submitted as a SameSite=Strict cookie.
"""

from __future__ import annotations

import hmac
import secrets
from html import escape
from pathlib import Path
from urllib.parse import parse_qs

import swagger_ui_bundle
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import Route

from domain.errors import TokenInvalid
from infra.services import reset as reset_service
from infra.services.unit_of_work import ServiceContext

STATIC = Path(__file__).parent / "static"
SWAGGER_UI = Path(str(swagger_ui_bundle.swagger_ui_path))
# The only files /docs/assets/ serves, and where each one lives.
DOCS_ASSETS: dict[str, Path] = {
    "swagger-ui.css": SWAGGER_UI / "swagger-ui.css",
    "swagger-ui-bundle.js": SWAGGER_UI / "swagger-ui-bundle.js",
    "swagger-ui-standalone-preset.js": SWAGGER_UI / "swagger-ui-standalone-preset.js",
    "favicon-32x32.png": SWAGGER_UI / "favicon-32x32.png",
    "docs-init.js": STATIC / "docs-init.js",
}
# Swagger UI 5.31 applies one inline style of fixed content (seen as a CSP
# report in Chromium); its hash allows exactly that one and nothing else. Its
# stylesheet draws icons from data: URIs. Everything else is ours.
SWAGGER_UI_STYLE = "'unsafe-hashes' 'sha256-RL3ie0nH+Lzz2YNqQN83mnU0J1ot4QL7b99vMdIX99w='"
DOCS_CSP = ("default-src 'none'; script-src 'self'; style-src 'self' " + SWAGGER_UI_STYLE + "; img-src 'self' data:; "
            "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
# The reset page runs no script at all.
RESET_CSP = "default-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
PAGE_HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
RESET_PATH = "/reset"
# Pages for people, not the JSON API: /openapi.json does not describe them.
PAGE_PATHS = frozenset({"/docs", "/docs/assets/{name}", RESET_PATH})
CSRF_COOKIE = "authledger_reset_csrf"
CSRF_FIELD = "csrf_token"
MAX_FORM_BYTES = 4096

DOCS_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>authledger API documentation</title>
<link rel="stylesheet" href="/docs/assets/swagger-ui.css">
<link rel="icon" type="image/png" href="/docs/assets/favicon-32x32.png">
</head>
<body>
<main><h1>authledger API documentation</h1><div id="swagger-ui"></div></main>
<script src="/docs/assets/swagger-ui-bundle.js"></script>
<script src="/docs/assets/swagger-ui-standalone-preset.js"></script>
<script src="/docs/assets/docs-init.js"></script>
</body>
</html>
"""


async def docs_page(request: Request) -> Response:
    return HTMLResponse(DOCS_PAGE, headers={**PAGE_HEADERS, "Content-Security-Policy": DOCS_CSP})


async def docs_asset(request: Request) -> Response:
    path = DOCS_ASSETS.get(request.path_params["name"])
    if path is None:
        return HTMLResponse("<!DOCTYPE html><title>Not found</title><h1>Not found</h1>", 404, headers=PAGE_HEADERS)
    return FileResponse(path, headers={**PAGE_HEADERS, "Cache-Control": "public, max-age=86400"})


def docs_routes() -> list[Route]:
    return [Route("/docs", docs_page, methods=["GET"]), Route("/docs/assets/{name}", docs_asset, methods=["GET"])]


# -- the development reset page -----------------------------------------------------------------

STATE_OF_REFUSAL = (("already used", "used"), ("expired", "expired"), ("replaced", "superseded"),
                    ("withdrawn by support", "invalidated"))


def token_state(ctx: ServiceContext, token: str) -> tuple[str, str]:
    """(state, sentence): valid, used, expired, superseded, invalidated or unknown, from the verify service's
    answer."""
    try:
        request = reset_service.verify_token(ctx, token)
    except TokenInvalid as refused:
        sentence = refused.message
        state = next((state for words, state in STATE_OF_REFUSAL if words in sentence), "unknown")
        return state, sentence
    return "valid", f"The reset link is valid until {request.expires_at.isoformat()}."


def _page(title: str, body: str, status: int = 200, *, csrf: str | None = None) -> Response:
    html = f"""<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>{escape(title)} (development stand-in)</title></head>
<body>
<header role="note"><p><strong>Development stand-in.</strong> authledger serves this page so that reset links
work on a development machine. Your application serves its own reset page: set
<code>AUTHLEDGER_RESET_URL</code> to it.</p></header>
<main>
<h1>{escape(title)}</h1>
{body}
</main>
</body>
</html>
"""
    response = HTMLResponse(html, status, headers={**PAGE_HEADERS, "Content-Security-Policy": RESET_CSP,
                                                   "Cache-Control": "no-store"})
    if csrf is not None:
        response.set_cookie(CSRF_COOKIE, csrf, path=RESET_PATH, httponly=True, samesite="strict",
                            secure=False, max_age=3600)
    return response


def _consume_form(token: str, csrf: str) -> str:
    return f"""<form method="post" action="{RESET_PATH}">
<input type="hidden" name="token" value="{escape(token)}">
<input type="hidden" name="{CSRF_FIELD}" value="{escape(csrf)}">
<p>Your application would ask for the new password here; this stand-in only uses up the link.</p>
<p><button type="submit">Use this link: reset the password</button></p>
</form>"""


class ResetPage:
    """GET shows the token's state and a button; POST consumes the token once."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx

    async def show(self, request: Request) -> Response:
        tokens = request.query_params.getlist("token")
        if len(tokens) != 1 or not tokens[0]:
            return _page("Reset your password", "<p>This page opens from the link in a reset email: "
                         "the link carries a <code>token</code>.</p>", 400)
        token = tokens[0]
        state, sentence = await run_in_threadpool(token_state, self.ctx, token)
        body = f'<p data-state="{state}">Link state: <strong>{state}</strong>. {escape(sentence)}</p>'
        if state != "valid":
            return _page("Reset your password", body)
        csrf = secrets.token_urlsafe(32)
        return _page("Reset your password", body + _consume_form(token, csrf), csrf=csrf)

    async def consume(self, request: Request) -> Response:
        form = await _small_form(request)
        if form is None:
            return _page("Reset refused", "<p>The form is missing or malformed.</p>", 400)
        sent, kept = form.get(CSRF_FIELD, ""), request.cookies.get(CSRF_COOKIE, "")
        if not sent or not kept or not hmac.compare_digest(sent, kept):
            return _page("Reset refused", "<p>The form expired or came from another page: open the link from "
                         "the email again.</p>", 403)
        token = form.get("token", "")
        if not token:
            return _page("Reset refused", "<p>The form carries no token.</p>", 400)
        metadata = {"actor": "development reset page", "request_id": request.state.request_id,
                    "correlation_id": request.state.request_id}
        try:
            outcome = await run_in_threadpool(reset_service.consume_token, self.ctx, token, metadata)
        except TokenInvalid as refused:
            return _page("Reset refused", f'<p data-state="refused">{escape(refused.message)}</p>', 400)
        return _page("Password reset", f'<p data-state="consumed">The link was used at '
                     f"{escape(outcome.completed_at.isoformat())}: in your application, the new password "
                     "would be set now. The link no longer works.</p>")


async def _small_form(request: Request) -> dict[str, str] | None:
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        return None
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return None
    try:
        fields = parse_qs(body.decode("ascii"), strict_parsing=False, max_num_fields=10)
    except (UnicodeDecodeError, ValueError):
        return None
    if any(len(values) != 1 for values in fields.values()):
        return None
    return {name: values[0] for name, values in fields.items()}


def reset_page_routes(ctx: ServiceContext) -> list[Route]:
    page = ResetPage(ctx)
    return [Route(RESET_PATH, page.show, methods=["GET"]), Route(RESET_PATH, page.consume, methods=["POST"])]

