"""`authledger tenants`: the applications that own users (the default tenant always exists), and their settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from commands.output import cli_metadata, emit, json_option
from domain.branding import SHIPPED_LOCALES, check_locale
from domain.policy import POLICY_OVERRIDES
from domain.tenants import BRANDING_FIELDS, POLICY_FIELDS, SETTING_FIELDS, parse_purposes
from infra.bootstrap import App
from infra.emails.tenant_templates import read_template_dir
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


def _policy_options(command: Any) -> Any:
    """One ``--NAME SECONDS|N`` flag per rule a tenant may set (``domain.policy.POLICY_OVERRIDES``)."""
    for name, override in reversed(POLICY_OVERRIDES.items()):
        bounds = override.bounds
        command = click.option(f"--{name.replace('_', '-')}", name, type=int, metavar="N",
                               help=f"{override.doc} {bounds.low} to {bounds.high}, as AUTHLEDGER_{name.upper()} "
                                    "allows.")(command)
    return command


@tenants.command("configure")
@click.argument("name")
@click.option("--reset-url", help="The page its reset links open (`?token=` added): https://, http:// only to "
                                  "a loopback host.")
@click.option("--sender", metavar="ADDRESS", help="The From address of its emails: one plain address.")
@click.option("--sender-name", metavar="TEXT", help="The From line's display name (no quotes, @ or brackets).")
@click.option("--reply-to", metavar="ADDRESS", help="Where replies to its emails go: one plain address.")
@click.option("--product-name", metavar="TEXT", help="What its emails call the application ($product_name).")
@click.option("--support-contact", metavar="TEXT",
              help="Where its users get help ($support_contact): an address or an https:// page.")
@click.option("--default-locale", metavar="TAG", help=f"Its emails' language: one of {', '.join(SHIPPED_LOCALES)}.")
@click.option("--purpose", "purposes", multiple=True, metavar="NAME=TEXT",
              help="An OTP purpose the tenant allows, and what its emails call the code (e.g. "
                   "'login=sign-in code'); repeat for each. The list given replaces the tenant's.")
@click.option("--default-purposes", is_flag=True,
              help="Drop the tenant's purposes: it allows the deployment's (AUTHLEDGER_OTP_PURPOSES) again.")
@click.option("--template-dir", type=click.Path(path_type=Path), metavar="DIR",
              help="Folder of template files replacing the deployment's for this tenant: files for its default "
                   "locale, sub-folders (de/, en/) for others. The set replaces the tenant's whole.")
@_policy_options
@click.option("--clear", "cleared", multiple=True, type=click.Choice(SETTING_FIELDS), metavar="SETTING",
              help="Give a setting back to the deployment's default (e.g. --clear sender); repeat for each.")
@click.option("--reason", required=True, help="Why, for the record: a ticket or request (no email address).")
@click.option("--actor", help="Who asks for the change, for the record; $USER when left out.")
@json_option
@click.pass_obj
def tenants_configure(app: App, name: str, purposes: tuple[str, ...], default_purposes: bool,
                      template_dir: Path | None, cleared: tuple[str, ...], reason: str, actor: str | None,
                      as_json: bool, **settings: Any) -> None:
    """Change a tenant's settings; each change is recorded with who, why and what changed.

    Every value is checked by the rule of the deployment-wide setting it
    stands in for; a refused one records nothing. A change of the reset URL,
    sender, sender name or reply-to is logged at WARNING.
    """
    if purposes and default_purposes:
        raise click.UsageError("give --purpose or --default-purposes, not both")
    changes: dict[str, Any] = {field: value for field, value in settings.items() if value is not None}
    if purposes:
        changes["purposes"] = parse_purposes(purposes)
    if template_dir is not None:
        locale = changes.get("default_locale") or tenant_service.show_tenant(app.services, name).settings.default_locale
        changes["templates"] = read_template_dir(template_dir, check_locale(locale or "en"))
    for field in (*cleared, *(["purposes"] if default_purposes else [])):
        if field in changes:
            raise click.UsageError(f"--clear {field} and a value for it: give one")
        changes[field] = None
    metadata = cli_metadata("tenants configure", actor)
    outcome = tenant_service.configure_tenant(app.services, name, changes=changes, actor=metadata["actor"],
                                              reason=reason, metadata=metadata)
    data = {**tenant_service.settings_data(outcome.tenant), "recorded": outcome.recorded,
            "changed": list(outcome.changed)}
    said = (f"tenant {name} configured: settings version {data['version']} ({', '.join(outcome.changed)})"
            if outcome.recorded else f"tenant {name}: nothing changed, its settings already were so")
    emit(data, as_json, f"{said}\n{_settings_text(outcome.tenant)}")


@tenants.command("show")
@click.argument("name")
@click.option("--history", "with_history", is_flag=True, help="Also every change: when, who, why and what.")
@json_option
@click.pass_obj
def tenants_show(app: App, name: str, with_history: bool, as_json: bool) -> None:
    """A tenant's settings now (each it never set is the deployment's), and with --history every change to them.

    ``--json`` always carries the history.
    """
    view = tenant_service.show_tenant(app.services, name)
    history = tenant_service.tenant_history(app.services, name)
    data = {**tenant_service.settings_data(view), "history": [tenant_service.change_data(change) for change in history]}
    configured = f", configured {data['configured_at']}" if data["configured_at"] else ", never configured"
    lines = [f"tenant {name}: settings version {data['version']}{configured}", _settings_text(view)]
    if with_history and history:
        lines.append("history:")
        for change in data["history"]:
            flag = "  [where links or mail go changed]" if change["takeover"] else ""
            lines.append(f"  {change['version']}. {change['configured_at']} by {change['actor']} "
                         f"({change['reason']}){flag}")
            lines += [f"       {field}: {_value_text(field, c['from'])} -> {_value_text(field, c['to'])}"
                      for field, c in change["changes"].items()]
    elif with_history:
        lines.append("history: no change yet")
    emit(data, as_json, "\n".join(lines))


def _settings_text(view: tenant_service.TenantView) -> str:
    settings = view.settings
    lines = []
    for field in (*BRANDING_FIELDS, *POLICY_FIELDS):
        value = getattr(settings, field)
        lines.append(f"{field:<19} {value if value is not None else '(deployment default)'}")
    files = [f"{t.locale}/{t.file}" for t in settings.templates]
    lines.append(f"{'templates':<19} {', '.join(files) if files else '(deployment default)'}")
    return "\n".join([*lines, _purposes_text(view)])


def _value_text(field: str, value: Any) -> str:
    if field == "purposes":
        return _listed(value)
    if field == "templates":
        return ", ".join(f"{locale}/{file}" for locale, files in value.items() for file in files) or "(none)"
    return "(deployment default)" if value is None else str(value)


def _purposes_text(view: tenant_service.TenantView) -> str:
    source = "declared by the tenant" if view.purposes_from == "tenant" else "the deployment's, none declared"
    width = max(len(p.name) for p in view.purposes)
    return "\n".join([f"purposes ({source}):", *(f"  {p.name:<{width}}  {p.text}" for p in view.purposes)])


def _listed(purposes: dict[str, str]) -> str:
    return ", ".join(f"{name}={text}" for name, text in purposes.items()) or "(the deployment's)"
