"""The review console at ``/console``: server-rendered pages over the one lookup, for a `review` key.

``Console`` builds the ``Shell`` every page stands on (``infra.console.shell``:
sessions, forms, templates, security headers) and the pages by room:
``sign_in_pages``, ``case_pages`` (search, case, download, erase),
``support_pages`` (the case page's invalidate and resend forms),
``outbox_pages``, ``audit_pages`` and ``tenant_pages``. ``Console.routes`` is their routes in one
list; the pages import the shell, and only this module imports the pages.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from starlette.routing import BaseRoute, Mount, Router
from starlette.staticfiles import StaticFiles

from infra.audit.background import VerificationRunner
from infra.console.audit_pages import AuditPages
from infra.console.case_pages import CasePages
from infra.console.cases import AddressIndex
from infra.console.outbox_pages import OutboxPages
from infra.console.sessions import DEFAULT_IDLE
from infra.console.shell import PREFIX, SecurityHeaders, Shell, SigningKey
from infra.console.sign_in_pages import SignInPages
from infra.console.support_pages import SUPPORT_DONE, SupportPages
from infra.console.tenant_pages import TenantPages
from infra.services.unit_of_work import ServiceContext

STATIC = Path(__file__).parent / "static"


class Console:
    """The console's pages, bound to one ``ServiceContext``.

    ``address_index`` finds the users of an email address (default: the HMAC index over ``ctx``'s keys).
    ``signing_key`` loads the audit signing key that signs a case's download and the audit digest
    (none: no download). ``verification`` runs the audit page's chain verifications, one at a time.
    """

    def __init__(self, ctx: ServiceContext, *, idle: timedelta = DEFAULT_IDLE,
                 address_index: AddressIndex | None = None, signing_key: SigningKey | None = None,
                 verification: VerificationRunner | None = None) -> None:
        self.shell = Shell(ctx, idle=idle, signing_key=signing_key)
        self.verification = verification or VerificationRunner(ctx.engine, clock=ctx.clock)
        cases = CasePages(self.shell, address_index, notices=SUPPORT_DONE)
        pages = (SignInPages(self.shell), cases, SupportPages(self.shell, cases), OutboxPages(self.shell),
                 AuditPages(self.shell, self.verification), TenantPages(self.shell))
        self.routes: list[BaseRoute] = [
            *(route for page in pages for route in page.routes),
            Mount("/static", StaticFiles(directory=STATIC), name="console-static"),
        ]

    def mount(self) -> Mount:
        """The console under ``/console``, with its headers on every answer."""
        return Mount(PREFIX, app=SecurityHeaders(Router(routes=self.routes)))
