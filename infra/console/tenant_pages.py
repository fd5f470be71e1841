"""The tenant page: the signed-in key's tenant's settings now and every change to them, takeovers marked.

A change of the reset URL, sender, sender name or reply-to sends a tenant's
links or mail somewhere else, which is how an account takeover would start:
such a change is drawn apart (``takeover``) with who made it and why, so
that a reviewer sees it without reading every line. The page reads; changes
are made with ``authledger tenants configure`` or ``PATCH /v1/admin/tenant``.
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from domain.tenants import BRANDING_FIELDS, POLICY_FIELDS, TAKEOVER_FIELDS
from infra.console.sessions import Session
from infra.console.shell import Shell
from infra.services import tenants as tenant_service
from projections.tenants import SettingsChange

# The settings in the page's words, in the order shown.
LABELS = {
    "reset_url": "Reset page", "sender": "Sender address", "sender_name": "Sender name", "reply_to": "Reply-To",
    "product_name": "Product name", "support_contact": "Support contact", "default_locale": "Default language",
    "reset_ttl": "Reset link lifetime (s)", "reset_cooldown": "Reset cooldown (s)",
    "reset_hourly_limit": "Reset requests per user per hour", "otp_ttl": "Code lifetime (s)",
    "otp_cooldown": "Code cooldown (s)", "otp_hourly_limit": "Code requests per user per hour",
    "otp_digits": "Code digits", "limit_per_address": "Emails per address per hour",
    "purposes": "OTP purposes", "templates": "Template overrides",
}


class TenantPages:
    """The tenant page."""

    def __init__(self, shell: Shell) -> None:
        self.shell = shell
        self.routes: list[BaseRoute] = [Route("/tenant", shell.page(self.tenant_page), methods=["GET"])]

    async def tenant_page(self, request: Request, session: Session) -> Response:
        tenant = session.caller.tenant
        view, history = await run_in_threadpool(self._read, tenant)
        rows = [(field, LABELS[field], getattr(view.settings, field), field in TAKEOVER_FIELDS)
                for field in (*BRANDING_FIELDS, *POLICY_FIELDS)]
        changes = [{**tenant_service.change_data(change),
                    "lines": [(LABELS.get(field, field), _said(c["from"]), _said(c["to"]), field in TAKEOVER_FIELDS)
                              for field, c in change.changes.items()]}
                   for change in reversed(history)]
        return self.shell.render(
            "tenant.html", 200, session, csrf=session.csrf, heading=f"Tenant {tenant}", tenant_name=tenant,
            version=view.settings.version, rows=rows, purposes=view.purposes, purposes_from=view.purposes_from,
            templates=[f"{t.locale}/{t.file}" for t in view.settings.templates], changes=changes,
            takeovers=sum(1 for change in changes if change["takeover"]))

    def _read(self, tenant: str) -> tuple[tenant_service.TenantView, list[SettingsChange]]:
        ctx = self.shell.ctx
        return tenant_service.show_tenant(ctx, tenant), tenant_service.tenant_history(ctx, tenant)


def _said(value: Any) -> str:
    """A setting's value as a line of the page: None is the deployment's default."""
    if value is None:
        return "deployment default"
    if isinstance(value, dict):
        if all(isinstance(v, dict) for v in value.values()):  # templates: locale -> file -> text
            return ", ".join(f"{locale}/{file}" for locale, files in value.items() for file in files) or "none"
        return ", ".join(f"{name}={text}" for name, text in value.items()) or "the deployment's"
    return str(value)
