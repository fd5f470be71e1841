"""`authledger tenants`: the applications that own users (the default tenant always exists), and their settings."""

from __future__ import annotations

from typing import Any

import click

from commands.output import cli_metadata, emit, json_option
from domain.tenants import parse_purposes
from infra.bootstrap import App
from infra.services import tenants as tenant_service
from projections.tenants import SettingsChange


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
    assert created.created_at is not None  # only the default tenant, never created, has no time
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


@tenants.command("configure")
@click.argument("name")
@click.option("--purpose", "purposes", multiple=True, metavar="NAME=TEXT",
              help="An OTP purpose the tenant allows, and what its emails call the code (e.g. "
                   "'login=sign-in code'); repeat for each. The list given replaces the tenant's.")
@click.option("--default-purposes", is_flag=True,
              help="Drop the tenant's purposes: it allows the deployment's (AUTHLEDGER_OTP_PURPOSES) again.")
@click.option("--reason", required=True, help="Why, for the record: a ticket or request (no email address).")
@click.option("--actor", help="Who asks for the change, for the record; $USER when left out.")
@json_option
@click.pass_obj
def tenants_configure(app: App, name: str, purposes: tuple[str, ...], default_purposes: bool, reason: str,
                      actor: str | None, as_json: bool) -> None:
    """Change a tenant's settings; each change is recorded with who, why and what changed."""
    if purposes and default_purposes:
        raise click.UsageError("give --purpose or --default-purposes, not both")
    declared = () if default_purposes else (parse_purposes(purposes) if purposes else None)
    metadata = cli_metadata("tenants configure", actor)
    outcome = tenant_service.configure_tenant(app.services, name, purposes=declared, actor=metadata["actor"],
                                              reason=reason, metadata=metadata)
    data = {**_settings_data(outcome.tenant), "recorded": outcome.recorded}
    said = (f"tenant {name} configured: settings version {data['version']}" if outcome.recorded
            else f"tenant {name}: nothing changed, its settings already were so")
    emit(data, as_json, f"{said}\n{_purposes_text(outcome.tenant)}")


@tenants.command("show")
@click.argument("name")
@json_option
@click.pass_obj
def tenants_show(app: App, name: str, as_json: bool) -> None:
    """A tenant's settings now, and every change to them: when, who, why and what."""
    view = tenant_service.show_tenant(app.services, name)
    history = tenant_service.tenant_history(app.services, name)
    data = {**_settings_data(view), "history": [_change_data(change) for change in history]}
    configured = f", configured {data['configured_at']}" if data["configured_at"] else ", never configured"
    lines = [f"tenant {name}: settings version {data['version']}{configured}", _purposes_text(view)]
    if history:
        lines.append("history:")
        lines += [f"  {c['version']}. {c['configured_at']} by {c['actor']} ({c['reason']}): "
                  + "; ".join(f"{field} {_listed(change['from'])} -> {_listed(change['to'])}"
                              for field, change in c["changes"].items()) for c in data["history"]]
    emit(data, as_json, "\n".join(lines))


def _settings_data(view: tenant_service.TenantView) -> dict[str, Any]:
    configured_at = view.settings.configured_at
    return {"name": view.name, "version": view.settings.version,
            "configured_at": configured_at.isoformat() if configured_at else None,
            "purposes": {p.name: p.text for p in view.purposes}, "purposes_from": view.purposes_from}


def _change_data(change: SettingsChange) -> dict[str, Any]:
    return {"version": change.version, "configured_at": change.configured_at.isoformat(), "actor": change.actor,
            "reason": change.reason, "changes": change.changes}


def _purposes_text(view: tenant_service.TenantView) -> str:
    source = "declared by the tenant" if view.purposes_from == "tenant" else "the deployment's, none declared"
    width = max(len(p.name) for p in view.purposes)
    return "\n".join([f"purposes ({source}):", *(f"  {p.name:<{width}}  {p.text}" for p in view.purposes)])


def _listed(purposes: dict[str, str]) -> str:
    return ", ".join(f"{name}={text}" for name, text in purposes.items()) or "(the deployment's)"
