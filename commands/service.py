"""`authledger serve` and `authledger clients`: the HTTP API and its API keys."""

from __future__ import annotations

import click

from commands.output import cli_metadata, emit, json_option
from infra.bootstrap import App
from infra.services import clients as client_service


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535))
@click.option("--workers", default=1, show_default=True, type=click.IntRange(0, 64),
              help="Delivery worker threads in this process (0: the API only).")
@click.pass_obj
def serve(app: App, host: str, port: int, workers: int) -> None:
    """Run the HTTP API and the delivery workers; SIGTERM or Ctrl-C stops both cleanly.

    With no DATABASE_URL this initialises the embedded database, and prints
    where mail is delivered and a development API key.
    """
    from infra.http.serve import serve as run_server  # uvicorn and starlette load only to serve

    app.reserve_connections(workers)
    run_server(app, host=host, port=port, workers=workers, say=click.echo)


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
