"""`authledger suppressions`: a tenant's suppression list, and lifting an address off it."""

from __future__ import annotations

import click

from commands.output import cli_metadata, emit, existing_tenant, json_option
from infra.bootstrap import App
from infra.services.suppressions import lift, list_suppressions


@click.group()
def suppressions() -> None:
    """A tenant's suppression list: addresses that bounced for good or complained."""


@suppressions.command("list")
@existing_tenant("The tenant whose list to show.")
@json_option
@click.pass_obj
def list_command(app: App, tenant: str, as_json: bool) -> None:
    """The users whose address is suppressed, newest first (the list keeps hashes, never an address)."""
    found = list_suppressions(app.services, tenant)
    lines = [f"{s.user_id}: {s.addresses} address(es), last {s.reason} at {s.suppressed_at:%Y-%m-%d %H:%M:%S} UTC "
             f"(email {s.message_id})" for s in found if s.suppressed_at is not None]
    emit({"tenant": tenant, "suppressions": [s.as_dict() for s in found]}, as_json,
         "\n".join(lines) or f"no address of tenant {tenant} is suppressed")


@suppressions.command("lift")
@existing_tenant("The tenant whose list to lift the address from.")
@click.argument("address")
@click.option("--reason", required=True, help="Why, recorded with your name in the log (no address in it).")
@click.option("--actor", help="Who acts, as the log names them (default: $USER).")
@json_option
@click.pass_obj
def lift_command(app: App, tenant: str, address: str, reason: str, actor: str | None, as_json: bool) -> None:
    """Let creates to ADDRESS through again: one SuppressionLifted per suppression of it in the tenant."""
    metadata = cli_metadata("suppressions lift", actor)
    lifted = lift(app.services, tenant, address, actor=metadata["actor"], reason=reason, metadata=metadata)
    emit({"tenant": tenant, "lifted": lifted}, as_json, f"lifted {lifted} suppression(s) of that address")
