"""`authledger clients`: the API keys of the applications that call the HTTP API.

A client is named within its tenant (``--tenant``, the default tenant when
not given): two tenants may each have a client ``web``. This is the operator
at the server, so it may grant any scope, ``operator`` included, which no
key can grant over HTTP.
"""

from __future__ import annotations

import click

from commands.output import cli_metadata, emit, existing_tenant, json_option
from domain.clients import SCOPES
from domain.tenants import DEFAULT_TENANT
from infra.bootstrap import App
from infra.services import clients as client_service
from infra.services.clients import IssuedKey, key_json


@click.group()
def clients() -> None:
    """API keys of the applications that call the HTTP API."""


def _issued(key: IssuedKey, as_json: bool, said: str) -> None:
    emit({"name": key.name, "tenant": key.tenant, "scopes": list(key.scopes), "key_id": key.key_id,
          "api_key": key.api_key}, as_json,
         f"{said}; its API key {key.key_id}, shown this once (send it as 'Authorization: Bearer <key>'):"
         f"\n{key.api_key}")


@clients.command("create")
@click.argument("name")
@existing_tenant("The tenant the client acts for.")
@click.option("--scope", "scopes", multiple=True, required=True, metavar="SCOPE",
              help=f"What its keys may do; repeat for several: {', '.join(SCOPES)}.")
@json_option
@click.pass_obj
def clients_create(app: App, name: str, tenant: str, scopes: tuple[str, ...], as_json: bool) -> None:
    """Create a client and print its first API key, once: only its SHA-256 is kept."""
    created = client_service.create_client(app.services, name, metadata=cli_metadata("clients create"),
                                           tenant=tenant, scopes=scopes)
    _issued(created, as_json, f"client {created.name} created in tenant {created.tenant} "
                              f"with scopes {' '.join(created.scopes)}")


TENANT = existing_tenant("The tenant the client belongs to.")


def _tenant_flag(tenant: str) -> str:
    return "" if tenant == DEFAULT_TENANT else f" --tenant {tenant}"


@clients.command("rotate")
@click.argument("name")
@TENANT
@json_option
@click.pass_obj
def clients_rotate(app: App, name: str, tenant: str, as_json: bool) -> None:
    """Issue another key for a client; its other keys stay live until revoked."""
    issued = client_service.rotate_client(app.services, name, metadata=cli_metadata("clients rotate"), tenant=tenant)
    _issued(issued, as_json, f"client {issued.name}: new key issued, its other keys stay live until "
                             f"`authledger clients revoke {issued.name}{_tenant_flag(tenant)} --key KEY_ID`")


@clients.command("list")
@existing_tenant("Only this tenant's clients (every tenant's when not given).", default=None)
@json_option
@click.pass_obj
def clients_list(app: App, tenant: str | None, as_json: bool) -> None:
    """Every key of every client, live or revoked."""
    data = [key_json(row) for row in client_service.list_keys(app.engine, tenant=tenant)]
    lines = [f"{k['client']:<20} {k['key_id']:<22} {k['tenant']:<12} {k['status']:<8} {' '.join(k['scopes']):<32} "
             f"created {k['created_at']}" + (f", revoked {k['revoked_at']}" if k["revoked_at"] else "")
             for k in data]
    emit(data, as_json, "\n".join(lines) or "no clients yet; create one with `authledger clients create NAME`")


@clients.command("revoke")
@click.argument("name")
@TENANT
@click.option("--key", "key_id", default=None, metavar="KEY_ID", help="Revoke only this key (see `clients list`).")
@json_option
@click.pass_obj
def clients_revoke(app: App, name: str, tenant: str, key_id: str | None, as_json: bool) -> None:
    """Revoke one of a client's keys, or all of them; a revoked key's next request gets 401."""
    revoked = client_service.revoke_client(app.services, name, metadata=cli_metadata("clients revoke"),
                                           key_id=key_id, tenant=tenant)
    what = f"key {key_id} of client {name}" if key_id else f"client {name}"
    emit({"name": name, "revoked": bool(revoked), "already_revoked": not revoked, "key_ids": revoked}, as_json,
         f"{what} revoked" + (f" ({', '.join(revoked)})" if revoked and not key_id else "") if revoked
         else f"{what} was already revoked")
