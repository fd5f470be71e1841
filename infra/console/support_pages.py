"""The case page's support forms: withdraw a user's open links and codes, or send them a fresh one.

Admin actions, posted with the session's CSRF token like every console form
(``Shell.action``), and done by ``infra.services.support`` as the HTTP API
does them: on the session's tenant's user, recorded with the key's client
in the events' metadata and the reason typed. Bad input (no reason, one
holding an address, an unknown flow or purpose) is answered on the case
page with what was wrong, and nothing is written. A done action redirects
to the case page, which then tells it in its sentences and timeline.
"""

from __future__ import annotations

from typing import Protocol
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from domain.errors import AuthledgerError
from domain.support import check_flow, support_reason
from infra.console.cases import Case
from infra.console.sessions import Session
from infra.console.shell import ADMIN, PREFIX, Shell
from infra.services.support import invalidate_user, resend

# What the case page says after an action, by the ``done`` its redirect carries.
SUPPORT_DONE = {
    "invalidated": "Invalidated: the user's open links and codes no longer work, and an email of theirs still "
                   "queued will not be sent; recorded with your client's name and reason.",
    "nothing-open": "Nothing was open: no link or code was withdrawn, and nothing was recorded.",
    "resent": "Sent: a fresh link or code is queued to the address of the user's latest request, recorded as "
              "made by your client, with your reason.",
    "reused": "Not sent again: a link or code sent moments ago is still open (the cooldown), so it stands.",
}
NEEDS_ADMIN = "Support actions need an API key with the admin scope; this session's key has only review."


class CaseViews(Protocol):
    """What the forms use of ``infra.console.case_pages.CasePages``: finding a case, and showing it."""

    async def _case_of(self, session: Session, kind: str, value: str) -> Case | Response: ...

    def _case(self, session: Session, case: Case, *, status: int = 200, notice: str | None = None,
              error: str | None = None) -> Response: ...


class SupportPages:
    """The invalidate and resend forms of a user's case page."""

    def __init__(self, shell: Shell, cases: CaseViews) -> None:
        self.shell = shell
        self.cases = cases
        self.routes: list[BaseRoute] = [
            Route("/case/invalidate", shell.action(self.invalidate), methods=["POST"]),
            Route("/case/resend", shell.action(self.resend), methods=["POST"]),
        ]

    async def invalidate(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        found = await self._user_case(session, form)
        if isinstance(found, Response):
            return found
        user_id, case = found
        try:
            reason = support_reason(form.get("reason", ""))
            done = await run_in_threadpool(invalidate_user, self.shell.ctx, session.caller.tenant, user_id,
                                           reason=reason, metadata=self.shell.metadata(request, session))
        except AuthledgerError as refused:
            return self._refused(session, case, refused, "Not invalidated")
        return _back_to(user_id, "invalidated" if done.request_ids or done.challenge_ids else "nothing-open")

    async def resend(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        found = await self._user_case(session, form)
        if isinstance(found, Response):
            return found
        user_id, case = found
        try:
            flow, reason = check_flow(form.get("flow", "")), support_reason(form.get("reason", ""))
            purpose = (form.get("purpose", "").strip() or None) if flow == "otp" else None
            resent = await run_in_threadpool(
                lambda: resend(self.shell.ctx, session.caller.tenant, user_id, flow=flow, reason=reason,
                               purpose=purpose, client=session.caller.client,
                               metadata=self.shell.metadata(request, session)))
        except AuthledgerError as refused:
            return self._refused(session, case, refused, "Not sent")
        return _back_to(user_id, "reused" if resent.outcome.reused else "resent")

    async def _user_case(self, session: Session, form: dict[str, str]) -> tuple[str, Case] | Response:
        """The user the form names and their case, for an admin session; else the answer refusing it."""
        if not session.caller.may(ADMIN):
            return self.shell.refused(NEEDS_ADMIN, 403, session)
        user_id = form.get("user_id", "")
        case = await self.cases._case_of(session, "user", user_id)
        if isinstance(case, Response):
            return case
        return user_id, case

    def _refused(self, session: Session, case: Case, refused: AuthledgerError, what: str) -> Response:
        """The case page again, saying what was wrong; a server's own failure is not the form's to explain."""
        if refused.http_status >= 500:
            raise refused
        return self.cases._case(session, case, status=refused.http_status, error=f"{what}: {refused.message}.")


def _back_to(user_id: str, done: str) -> Response:
    return RedirectResponse(f"{PREFIX}/case?{urlencode({'kind': 'user', 'id': user_id, 'done': done})}",
                            status_code=303)
