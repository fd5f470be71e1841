"""`authledger tenants`: the applications that own users; the default tenant always exists."""

from __future__ import annotations

import click

from commands.output import cli_metadata, emit, json_option
from infra.bootstrap import App
from infra.services import tenants as tenant_service


@click.group()
def tenants() -> None:
    """The applications that own users; the default tenant always exists."""


@tenants.command("create")
@click.argument("name")
@json_option
@click.pass_obj
def tenants_create(app: App, name: str, as_json: bool) -> None:
    """Create a tenant, so that clients can be created in it."""
    created = tenant_service.create_tenant(app.services, name, metadata=cli_metadata("tenants create"))
    emit({"name": created.name, "created_at": created.created_at.isoformat()}, as_json,
         f"tenant {created.name} created; add a client with "
         f"`authledger clients create NAME --tenant {created.name} --scope send`")


@tenants.command("list")
@json_option
@click.pass_obj
def tenants_list(app: App, as_json: bool) -> None:
    """Every tenant, the default first."""
    found = tenant_service.list_tenants(app.engine)
    data = [{"name": t.name, "created_at": t.created_at.isoformat() if t.created_at else None} for t in found]
    emit(data, as_json, "\n".join(f"{t['name']:<24} " + (f"created {t['created_at']}" if t["created_at"]
                                                          else "(default, always exists)") for t in data))
