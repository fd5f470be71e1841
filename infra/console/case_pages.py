"""The search page and a case's pages: the case itself, its signed download, and erasing its user."""

from __future__ import annotations

import io
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from markupsafe import Markup
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from domain.errors import InvalidInput, NotFound
from domain.privacy import erasure_reason, subject_of
from infra.audit.export import export_case
from infra.console import svg
from infra.console.cases import KINDS, AddressIndex, Case, find_case, search
from infra.console.glance import Line, after, glance, short_id
from infra.console.sessions import Session
from infra.console.shell import ADMIN, PREFIX, Shell
from infra.services.address_index import users_by_address
from infra.services.privacy import erase_user, preview
from projections.timeline import format_time

NOTHING_FOUND = "Nothing found."
ERASED = {"erased": "Erased: the user's data key is destroyed, so their addresses read [erased] from now on; the "
                     "erasure is recorded with your client's name and reason."}
NOT_ERASED_AGAIN = "Already erased at {at}, with nothing left to destroy: nothing changed."
NEEDS_ADMIN_TO_ERASE = "Erasing a user needs an API key with the admin scope; this session's key has only review."
NO_SIGNING_KEY = ("This server has no audit signing key (AUTHLEDGER_SIGNING_KEY or AUTHLEDGER_SIGNING_KEY_FILE), "
                  "so it cannot sign a download of the case.")


class CasePages:
    """Finding a case by user, request or message id (or an address, through ``address_index``), and its pages.

    ``address_index`` finds the users of an email address (default: the HMAC index over the shell's keys).
    ``notices`` are what the case page says after other pages' actions, by the ``done`` their redirect carries.
    """

    def __init__(self, shell: Shell, address_index: AddressIndex | None = None,
                 notices: Mapping[str, str] | None = None) -> None:
        self.shell = shell
        self.notices = {**ERASED, **(notices or {})}
        ctx = shell.ctx
        self.address_index: AddressIndex = address_index or (
            lambda tenant, address: users_by_address(ctx, tenant, address))
        self.routes: list[BaseRoute] = [
            Route("/", shell.page(self.search_page), methods=["GET"]),
            Route("/search", shell.action(self.search), methods=["POST"]),
            Route("/case", shell.page(self.case_page), methods=["GET"]),
            Route("/case.jsonl", shell.page(self.case_download), methods=["GET"]),
            Route("/case/erase", shell.action(self.case_erase), methods=["POST"]),
        ]

    async def search_page(self, request: Request, session: Session) -> Response:
        return self.shell.render("search.html", 200, session, csrf=session.csrf, nothing=None)

    async def search(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        query = form.get("q", "")
        found = await run_in_threadpool(search, self.shell.ctx.read_engine, session.caller.tenant, query,
                                        address_index=self.address_index) if len(query) <= 320 else None
        if found is None:  # the same answer for unknown ids and other tenants' ids; a search that found nothing
            return self.shell.render("search.html", 200, session, csrf=session.csrf, nothing=NOTHING_FOUND)
        if isinstance(found, list):  # an address several users had: the reviewer chooses
            return self.shell.render("search.html", 200, session, csrf=session.csrf, nothing=None, users=found)
        kind, value = found
        return RedirectResponse(f"{PREFIX}/case?{urlencode({'kind': kind, 'id': value})}", status_code=303)

    async def _case_of(self, session: Session, kind: str, value: str, *, to_write: bool = False) -> Case | Response:
        """The case of ``value`` as a ``kind`` id in the session's tenant; or the search page saying nothing found.

        The one way a page finds its case: the case page and its download by their query, the erase form by its user.
        Read from the read replica if there is one, except the case an erasure (``to_write``) is decided on.
        """
        case = None
        ctx = self.shell.ctx
        if kind in KINDS and value:
            case = await run_in_threadpool(find_case, ctx.engine if to_write else ctx.read_engine,
                                           session.caller.tenant, kind, value, now=ctx.clock.now())
        if case is None:
            return self.shell.render("search.html", 404, session, csrf=session.csrf, nothing=NOTHING_FOUND)
        return case

    async def case_page(self, request: Request, session: Session) -> Response:
        case = await self._case_of(session, request.query_params.get("kind", ""), request.query_params.get("id", ""))
        if isinstance(case, Response):
            return case
        return self._case(session, case, notice=self.notices.get(request.query_params.get("done", "")))

    def _case(self, session: Session, case: Case, *, status: int = 200, notice: str | None = None,
              error: str | None = None) -> Response:
        return self.shell.render("case.html", status, session, csrf=session.csrf, admin=session.caller.may(ADMIN),
                                 notice=notice, error=error, **_case_context(case, self.shell.ctx.clock.now()))

    async def case_download(self, request: Request, session: Session) -> Response:
        """The case as JSON Lines: its events in full, the rest of their stretch of the chain as hashes, signed."""
        case = await self._case_of(session, request.query_params.get("kind", ""), request.query_params.get("id", ""))
        if isinstance(case, Response):
            return case
        key = self.shell.signing_key()
        if key is None:
            return self.shell.refused(NO_SIGNING_KEY, 409, session)
        out = io.StringIO()
        try:
            await run_in_threadpool(export_case, self.shell.ctx.read_engine, key,
                                    [r.global_position for r in case.events], out)
        except NotFound as error:
            return self.shell.refused(f"Not downloadable yet: {error.message}.", 409, session)
        return Response(out.getvalue(), media_type="application/x-ndjson", headers={
            "Content-Disposition": f'attachment; filename="authledger-{case.kind}-case.jsonl"'})

    async def case_erase(self, request: Request, session: Session, form: dict[str, str]) -> Response:
        """Erase the case's user, an admin action in two steps: the reason, then a confirmation of what goes.

        The erasure is ``erase_user``'s, as ``POST /v1/users/{user_id}/erasure`` does it: the caller's
        tenant's user, recorded with the key's client in the event's metadata.
        """
        if not session.caller.may(ADMIN):
            return self.shell.refused(NEEDS_ADMIN_TO_ERASE, 403, session)
        user_id = form.get("user_id", "")
        case = await self._case_of(session, "user", user_id, to_write=True)
        if isinstance(case, Response):
            return case
        try:
            reason = erasure_reason(form.get("reason", ""))
        except InvalidInput as refused:
            return self._case(session, case, status=400, error=f"Not erased: {refused.message}.")
        if form.get("confirm") != "yes":  # the first step: say what would go, and ask
            found = await run_in_threadpool(preview, self.shell.ctx, subject_of(session.caller.tenant, user_id))
            return self.shell.render("erase.html", 200, session, csrf=session.csrf, heading=f"Erase user {user_id}?",
                                     user_id=user_id, reason=reason, preview=found,
                                     erased_at=format_time(found.erased_at) if found.erased_at else None)
        try:
            erasure = await run_in_threadpool(erase_user, self.shell.ctx, session.caller, user_id, reason,
                                              self.shell.metadata(request, session))
        except (InvalidInput, NotFound) as refused:
            return self._case(session, case, status=400 if isinstance(refused, InvalidInput) else 404,
                              error=f"Not erased: {refused.message}.")
        if not erasure.recorded:
            return self._case(session, case, notice=NOT_ERASED_AGAIN.format(at=format_time(erasure.erased_at)))
        return RedirectResponse(f"{PREFIX}/case?{urlencode({'kind': 'user', 'id': user_id, 'done': 'erased'})}",
                                status_code=303)


def _case_context(case: Case, now: datetime) -> dict[str, Any]:
    summary = glance(case.events, now=now)
    anchor = summary.anchor

    def since(moment: datetime | None) -> str:
        return after(anchor, moment) if anchor is not None and moment is not None else ""

    # Addresses as the one lookup gives every reviewer: plain text, or [erased] once the user's key is gone.
    rows = [{"position": e.global_position, "at": format_time(e.at), "after": since(e.at), "event": e.event_type,
             "client": e.actor or "-", "request_id": _parts((e.request_id,)) if e.request_id else None,
             "address": e.recipient or "", "what": e.summary} for e in case.review.timeline]
    return {"case": case, "heading": f"{case.kind.capitalize()} {case.value}",
            "anchor": format_time(anchor) if anchor else None,
            "facts": [(name, _parts(line)) for name, line in summary.facts],
            "answers": [(question, _parts(line)) for question, line in summary.answers],
            "sentences": [f.sentence for f in case.review.findings], "rows": rows,
            "unindexed": case.review.unindexed_events, "replica": case.review.replica,
            "picture": Markup(svg.draw(case.events))}


def _parts(line: Line) -> list[tuple[str, UUID | None]]:
    """A line for the template: each part's text, and for an id the whole id (shown on hover, and copied)."""
    return [(short_id(part), part) if isinstance(part, UUID) else (part, None) for part in line]
