"""`authledger clients`: the API keys of the applications that call the HTTP API."""

from __future__ import annotations

import click

from commands.output import cli_metadata, emit, json_option
from infra.bootstrap import App
from infra.services import clients as client_service


@click.group()
def clients() -> None:
    """API keys of the applications that call the HTTP API."""


@clients.command("create")
@click.argument("name")
@json_option
@click.pass_obj
def clients_create(app: App, name: str, as_json: bool) -> None:
    """Register a client and print its API key, once: only its SHA-256 is kept."""
    created = client_service.create_client(app.services, name, metadata=cli_metadata("clients create"))
    emit({"name": created.name, "api_key": created.api_key}, as_json,
         f"client {created.name} created; its API key, shown this once (send it as 'Authorization: Bearer <key>'):"
         f"\n{created.api_key}")


@clients.command("list")
@json_option
@click.pass_obj
def clients_list(app: App, as_json: bool) -> None:
    """Every client, active or revoked."""
    rows = client_service.list_clients(app.engine)
    data = [{"name": r.name, "status": r.status, "created_at": r.created_at.isoformat(),
             "revoked_at": r.revoked_at.isoformat() if r.revoked_at else None} for r in rows]
    lines = [f"{r['name']:<24} {r['status']:<8} created {r['created_at']}"
             + (f", revoked {r['revoked_at']}" if r["revoked_at"] else "") for r in data]
    emit(data, as_json, "\n".join(lines) or "no clients yet; create one with `authledger clients create NAME`")


@clients.command("revoke")
@click.argument("name")
@json_option
@click.pass_obj
def clients_revoke(app: App, name: str, as_json: bool) -> None:
    """Revoke a client's key; its next request gets 401."""
    revoked = client_service.revoke_client(app.services, name, metadata=cli_metadata("clients revoke"))
    emit({"name": name, "revoked": True, "already_revoked": not revoked}, as_json,
         f"client {name} revoked" if revoked else f"client {name} was already revoked")
