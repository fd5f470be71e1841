"""The audit page: how the chain is sealed, a chain verification in the background, a signed digest."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from domain.errors import NotFound
from infra.audit.background import VerificationRunner, digest_download, seal_state
from infra.console.sessions import Session
from infra.console.shell import PREFIX, Shell
from infra.errors import NothingSealed, TamperDetected
from projections.timeline import format_time

# A verification's state, in the page's words.
OUTCOMES = {"running": "running", "ok": "intact", "tampered": "tampered", "nothing sealed": "nothing sealed yet",
            "failed": "failed"}
NO_DIGEST_KEY = ("This server has no audit signing key (AUTHLEDGER_SIGNING_KEY or AUTHLEDGER_SIGNING_KEY_FILE), "
                 "so it cannot sign a digest.")


class AuditPages:
    """The audit page and its parts; ``verification`` runs the chain verifications, one at a time."""

    def __init__(self, shell: Shell, verification: VerificationRunner) -> None:
        self.shell = shell
        self.verification = verification
        self.routes: list[BaseRoute] = [
            Route("/audit", shell.page(self.audit_page), methods=["GET"]),
            Route("/audit/verify", shell.action(self.audit_verify), methods=["POST"]),
            Route("/audit/verification.json", self.audit_verification, methods=["GET"]),
            Route("/audit/digest.json", shell.page(self.audit_digest), methods=["GET"]),
        ]

    async def audit_page(self, request: Request, session: Session) -> Response:
        sealed = await run_in_threadpool(seal_state, self.shell.ctx.engine)
        status = self.verification.status()
        return self.shell.render(
            "audit.html", 200, session, csrf=session.csrf, heading="Audit", sealed=sealed,
            last_sealed_at=format_time(sealed.last_sealed_at) if sealed.last_sealed_at else None,
            verification=status, outcome=OUTCOMES.get(status.state, status.state) if status else None,
            can_sign=self.shell.can_sign)

    async def audit_verify(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        """Start a chain verification in the background (or join the running one) and go back to the page."""
        await run_in_threadpool(self.verification.start)
        return RedirectResponse(f"{PREFIX}/audit", status_code=303)

    async def audit_verification(self, request: Request) -> Response:
        """How the running or last verification stands, for the page's script to show progress."""
        session = await self.shell.session(request)
        if isinstance(session, Response):
            return JSONResponse({"state": "signed-out"}, status_code=401)
        status = self.verification.status()
        if status is None:
            return JSONResponse({"state": "none"})
        return JSONResponse({**status.as_dict(), "outcome": OUTCOMES.get(status.state, status.state)})

    async def audit_digest(self, request: Request, session: Session) -> Response:
        """A signed digest of the chain head, checked first, as a file."""
        key = self.shell.signing_key()
        if key is None:
            return self.shell.refused(NO_DIGEST_KEY, 409, session)
        try:
            download = await run_in_threadpool(digest_download, self.shell.ctx.engine, key)
        except (NotFound, NothingSealed, TamperDetected) as refused:
            return self.shell.refused(f"No digest: {refused.message}", 409, session)
        return Response(download.content, media_type=download.media_type, headers={
            "Content-Disposition": f'attachment; filename="{download.filename}"'})
