"""`authledger webhooks`: a tenant's endpoints, called signed when its users' facts happen (docs/webhooks.md).

The secret is printed once, by ``add`` and ``rotate``; only its sealed form
is kept. After ``rotate`` the old secret signs beside the new one for 24 h.
"""

from __future__ import annotations

import click

from commands.output import cli_metadata, emit, existing_tenant, json_option
from domain.webhooks import EVENT_TYPES, ROTATION_OVERLAP
from infra.bootstrap import App
from infra.services import webhooks as webhook_service
from infra.services.webhooks import NewSecret, endpoint_json

TENANT = existing_tenant("The tenant whose endpoint it is.")


@click.group()
def webhooks() -> None:
    """Endpoints of a tenant, told what happened, signed (Standard Webhooks)."""


def _shown(new: NewSecret, as_json: bool, said: str) -> None:
    emit(new.as_json(), as_json, f"{said}; its signing secret, shown this once:\n{new.secret}")


@webhooks.command("add")
@TENANT
@click.option("--url", required=True, help="Where to POST: https://, or http:// to this machine only.")
@click.option("--event", "events", multiple=True, metavar="TYPE",
              help=f"An event type to send; repeat for several; every type when left out: {', '.join(EVENT_TYPES)}.")
@json_option
@click.pass_obj
def webhooks_add(app: App, tenant: str, url: str, events: tuple[str, ...], as_json: bool) -> None:
    """Add an endpoint and print its id and its secret, once."""
    new = webhook_service.add_endpoint(app.services, tenant, url, events, metadata=cli_metadata("webhooks add"))
    _shown(new, as_json, f"endpoint {new.endpoint_id} added to tenant {new.tenant} for "
                         f"{' '.join(new.event_types) or 'every event type'}")


@webhooks.command("list")
@TENANT
@json_option
@click.pass_obj
def webhooks_list(app: App, tenant: str, as_json: bool) -> None:
    """The tenant's endpoints, removed ones too; never a secret."""
    data = [endpoint_json(row) for row in webhook_service.list_endpoints(app.services, tenant)]
    lines = [f"{e['endpoint_id']}  {e['status']:<8} {e['url']}  {' '.join(e['event_types']) or '(every type)'}"
             for e in data]
    emit(data, as_json, "\n".join(lines) or f"tenant {tenant} has no webhook endpoints")


@webhooks.command("rotate")
@click.argument("endpoint_id")
@TENANT
@json_option
@click.pass_obj
def webhooks_rotate(app: App, endpoint_id: str, tenant: str, as_json: bool) -> None:
    """Give the endpoint a new secret; the old one still signs, beside it, for 24 hours."""
    new = webhook_service.rotate_endpoint(app.services, tenant, endpoint_id, metadata=cli_metadata("webhooks rotate"))
    hours = int(ROTATION_OVERLAP.total_seconds() // 3600)
    _shown(new, as_json, f"endpoint {endpoint_id} has a new secret; the old one signs beside it for {hours} h")


@webhooks.command("remove")
@click.argument("endpoint_id")
@TENANT
@json_option
@click.pass_obj
def webhooks_remove(app: App, endpoint_id: str, tenant: str, as_json: bool) -> None:
    """Stop calling the endpoint; deliveries not yet made are skipped."""
    webhook_service.remove_endpoint(app.services, tenant, endpoint_id, metadata=cli_metadata("webhooks remove"))
    emit({"endpoint_id": endpoint_id, "tenant": tenant, "status": "removed"}, as_json,
         f"endpoint {endpoint_id} removed")
