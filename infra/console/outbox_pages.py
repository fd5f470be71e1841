"""The outbox page: the chart of every tenant's sending, the tenant's messages that need attention, re-drive."""

from __future__ import annotations

from uuid import UUID

from markupsafe import Markup
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from domain.errors import InvalidInput, NotFound
from infra.console.outbox import LISTS, message_of_tenant, outbox_view
from infra.console.sessions import Session
from infra.console.shell import ADMIN, PREFIX, Shell
from infra.delivery.redrive import Selection, redrive

REDRIVEN = {"redriven": "Re-driven: the message is queued again, due now, and the re-drive is recorded with "
                        "your client's name and reason."}
NEEDS_ADMIN_TO_REDRIVE = ("Re-driving a message needs an API key with the admin scope; this session's key "
                          "has only review.")


class OutboxPages:
    """The outbox page, and the admin's re-drive of one abandoned or failed message."""

    def __init__(self, shell: Shell) -> None:
        self.shell = shell
        self.routes: list[BaseRoute] = [
            Route("/outbox", shell.page(self.outbox_page), methods=["GET"]),
            Route("/outbox/redrive", shell.action(self.outbox_redrive), methods=["POST"]),
        ]

    async def outbox_page(self, request: Request, session: Session) -> Response:
        return await self._outbox(session, notice=REDRIVEN.get(request.query_params.get("done", "")))

    async def _outbox(self, session: Session, *, status: int = 200, notice: str | None = None,
                      error: str | None = None) -> Response:
        ctx = self.shell.ctx
        view = await run_in_threadpool(outbox_view, ctx, session.caller.tenant, now=ctx.clock.now())
        lists = [(key, title, view.lists[key]) for key, title in LISTS]
        return self.shell.render("outbox.html", status, session, csrf=session.csrf, heading="Outbox",
                                 chart=Markup(view.chart), lists=lists, admin=session.caller.may(ADMIN),
                                 replica=view.replica, notice=notice, error=error)

    async def outbox_redrive(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        """Re-drive one abandoned or failed message with a reason: an admin action, recorded with the client."""
        if not session.caller.may(ADMIN):
            return self.shell.refused(NEEDS_ADMIN_TO_REDRIVE, 403, session)
        message_id = _uuid(form.get("message_id", ""))
        if message_id is None or not await run_in_threadpool(
                message_of_tenant, self.shell.ctx.engine, session.caller.tenant, message_id):
            return await self._outbox(session, status=404, error="No such message in this tenant's outbox.")
        try:
            await run_in_threadpool(redrive, self.shell.ctx, Selection(message_id=message_id),
                                    reason=form.get("reason", ""), metadata=self.shell.metadata(request, session))
        except (InvalidInput, NotFound) as refused:
            return await self._outbox(session, status=400 if isinstance(refused, InvalidInput) else 404,
                                      error=f"Not re-driven: {refused.message}.")
        return RedirectResponse(f"{PREFIX}/outbox?done=redriven", status_code=303)


def _uuid(value: str) -> UUID | None:
    try:
        return UUID(value)
    except ValueError:
        return None
