"""Admin operations over HTTP, for a key with the ``admin`` scope and within its own tenant only.

Clients and their keys (list, create, rotate, revoke), webhook endpoints
(list, add, rotate, remove), the re-drive of an abandoned or failed message,
with a reason, the tenant's own settings (``GET``/``PATCH
/v1/admin/tenant``: each change a ``TenantConfigured`` fact with the key's
client as actor and the body's reason) and its suppression list (list, lift
with a reason). Another tenant's client or
message is answered exactly as one that does not exist: 404. A key may only
create or rotate keys whose scopes it holds itself, never ``operator`` (the
CLI's alone), and may not revoke an operator client: 403, nothing written
(``domain.clients.check_grant``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from domain.clients import CLIENT_NAME, Caller
from domain.errors import NotFound
from domain.tenants import Purpose, TemplateOverride
from domain.webhooks import ENDPOINT_ID
from infra.delivery.redrive import Selection, redrive
from infra.http import schemas
from infra.http.problems import safe_json
from infra.http.validation import bearer_key, canonical_uuid
from infra.services import clients as client_service
from infra.services import tenants as tenant_service
from infra.services import webhooks as webhook_service
from infra.services.clients import IssuedKey, key_json
from infra.services.suppressions import lift, list_suppressions
from infra.services.webhooks import endpoint_json
from infra.services.unit_of_work import ServiceContext

ADMIN = "admin"


def _json(data: Any, status_code: int = 200) -> Response:
    return Response(safe_json(data), status_code=status_code, media_type="application/json")


def _issued(key: IssuedKey) -> dict[str, Any]:
    return {"name": key.name, "tenant": key.tenant, "scopes": list(key.scopes), "key_id": key.key_id,
            "api_key": key.api_key}


def _client_name(request: Request) -> str:
    name = request.path_params["name"]
    if not CLIENT_NAME.fullmatch(name):  # cannot name a client: as unknown as any other
        raise NotFound(f"no client named {name[:63]!r}")
    return name


class Steps(Protocol):
    """What the admin handlers use of ``infra.http.api.Api``: its context and shared steps."""

    ctx: ServiceContext

    async def _checked(self, request: Request, schema: schemas.Schema, *, create: bool = False
                       ) -> tuple[dict[str, Any], str | None]: ...

    async def _authenticated(self, request: Request, scope: str, work: Callable[[Caller], Any]) -> Any: ...

    def _metadata(self, request: Request, caller: Caller) -> dict[str, str]: ...


class Admin:
    """The admin handlers, over the API's shared steps."""

    def __init__(self, api: Steps) -> None:
        self.api = api

    async def list_clients(self, request: Request) -> Response:
        bearer_key(request)
        found = await self.api._authenticated(
            request, ADMIN, lambda caller: client_service.list_keys(self.api.ctx.engine, tenant=caller.tenant))
        return _json({"keys": [key_json(row) for row in found]})

    async def create_client(self, request: Request) -> Response:
        body, _ = await self.api._checked(request, schemas.CLIENT_CREATE)
        issued = await self.api._authenticated(request, ADMIN, lambda caller: client_service.create_client(
            self.api.ctx, body["name"], self.api._metadata(request, caller), tenant=caller.tenant,
            scopes=body["scopes"], granter=caller))
        return _json(_issued(issued), 201)

    async def rotate_client(self, request: Request) -> Response:
        bearer_key(request)
        name = _client_name(request)
        issued = await self.api._authenticated(request, ADMIN, lambda caller: client_service.rotate_client(
            self.api.ctx, name, self.api._metadata(request, caller), tenant=caller.tenant, granter=caller))
        return _json(_issued(issued), 201)

    async def revoke_client(self, request: Request) -> Response:
        name = _client_name(request)
        body, _ = await self.api._checked(request, schemas.KEY_REVOKE)
        revoked = await self.api._authenticated(request, ADMIN, lambda caller: client_service.revoke_client(
            self.api.ctx, name, self.api._metadata(request, caller), key_id=body.get("key_id"),
            tenant=caller.tenant, revoker=caller))
        return _json({"name": name, "revoked": bool(revoked), "key_ids": revoked})

    async def redrive_message(self, request: Request) -> Response:
        given = request.path_params["message_id"]
        message_id = canonical_uuid(given)
        if message_id is None:
            raise NotFound(f"no message {given[:80]!r}: ids are UUIDs like 123e4567-e89b-12d3-a456-426614174000")
        body, _ = await self.api._checked(request, schemas.REDRIVE)

        def work(caller: Caller) -> Any:
            metadata = {**self.api._metadata(request, caller), "command": "admin redrive"}
            return redrive(self.api.ctx, Selection(message_id=message_id, tenant=caller.tenant),
                           reason=body["reason"], metadata=metadata)

        await self.api._authenticated(request, ADMIN, work)
        return _json({"message_id": str(message_id), "redriven": True, "state": "pending"})

    async def list_suppressions(self, request: Request) -> Response:
        bearer_key(request)
        found = await self.api._authenticated(
            request, ADMIN, lambda caller: list_suppressions(self.api.ctx, caller.tenant))
        return _json({"suppressions": [entry.as_dict() for entry in found]})

    async def lift_suppression(self, request: Request) -> Response:
        body, _ = await self.api._checked(request, schemas.SUPPRESSION_LIFT)

        def work(caller: Caller) -> Any:
            metadata = {**self.api._metadata(request, caller), "command": "admin suppressions lift"}
            return lift(self.api.ctx, caller.tenant, body["email"], actor=f"client:{caller.client}",
                        reason=body["reason"], metadata=metadata)

        return _json({"lifted": await self.api._authenticated(request, ADMIN, work)})


    async def show_tenant(self, request: Request) -> Response:
        bearer_key(request)

        def work(caller: Caller) -> dict[str, Any]:
            ctx = self.api.ctx
            history = tenant_service.tenant_history(ctx, caller.tenant)
            return {**tenant_service.settings_data(tenant_service.show_tenant(ctx, caller.tenant)),
                    "history": [tenant_service.change_data(change) for change in history]}

        return _json(await self.api._authenticated(request, ADMIN, work))

    async def configure_tenant(self, request: Request) -> Response:
        body, _ = await self.api._checked(request, schemas.TENANT_PATCH)
        changes = {field: _setting(field, value) for field, value in body.items() if field != "reason"}

        def work(caller: Caller) -> dict[str, Any]:
            metadata = {**self.api._metadata(request, caller), "command": "admin tenant"}
            outcome = tenant_service.configure_tenant(self.api.ctx, caller.tenant, changes=changes,
                                                      actor=metadata["actor"], reason=body["reason"],
                                                      metadata=metadata)
            return {**tenant_service.settings_data(outcome.tenant), "recorded": outcome.recorded,
                    "changed": list(outcome.changed)}

        return _json(await self.api._authenticated(request, ADMIN, work))


def _setting(field: str, value: Any) -> Any:
    """A setting as the body gives it, in the domain's form: purposes and templates as tuples of their values."""
    if value is None:
        return None
    if field == "purposes":
        return tuple(Purpose(item["name"], item["text"]) for item in value)
    if field == "templates":
        return tuple(TemplateOverride(item["locale"], item["file"], item["text"]) for item in value)
    if isinstance(value, float):  # a whole number sent as 600.0, which the schema admits as an integer
        return int(value)
    return value


def _endpoint_id(request: Request) -> str:
    given = request.path_params["endpoint_id"]
    if not ENDPOINT_ID.fullmatch(given):  # cannot name an endpoint: as unknown as any other
        raise NotFound(f"no webhook endpoint {given[:40]!r}")
    return str(given)


class Webhooks:
    """The webhook endpoints of the admin key's own tenant."""

    def __init__(self, api: Steps) -> None:
        self.api = api

    async def list(self, request: Request) -> Response:
        bearer_key(request)
        found = await self.api._authenticated(
            request, ADMIN, lambda caller: webhook_service.list_endpoints(self.api.ctx, caller.tenant))
        return _json({"endpoints": [endpoint_json(row) for row in found]})

    async def add(self, request: Request) -> Response:
        body, _ = await self.api._checked(request, schemas.WEBHOOK_CREATE)
        added = await self.api._authenticated(request, ADMIN, lambda caller: webhook_service.add_endpoint(
            self.api.ctx, caller.tenant, body["url"], body.get("event_types", ()),
            self.api._metadata(request, caller)))
        return _json(added.as_json(), 201)

    async def rotate(self, request: Request) -> Response:
        bearer_key(request)
        endpoint_id = _endpoint_id(request)
        rotated = await self.api._authenticated(request, ADMIN, lambda caller: webhook_service.rotate_endpoint(
            self.api.ctx, caller.tenant, endpoint_id, self.api._metadata(request, caller)))
        return _json(rotated.as_json(), 201)

    async def remove(self, request: Request) -> Response:
        bearer_key(request)
        endpoint_id = _endpoint_id(request)
        await self.api._authenticated(request, ADMIN, lambda caller: webhook_service.remove_endpoint(
            self.api.ctx, caller.tenant, endpoint_id, self.api._metadata(request, caller)))
        return _json({"endpoint_id": endpoint_id, "status": "removed"})


def admin_routes(admin: Admin) -> list[Route]:
    hooks = Webhooks(admin.api)
    return [
        Route("/v1/admin/tenant", admin.show_tenant, methods=["GET"]),
        Route("/v1/admin/tenant", admin.configure_tenant, methods=["PATCH"]),
        Route("/v1/admin/clients", admin.list_clients, methods=["GET"]),
        Route("/v1/admin/clients", admin.create_client, methods=["POST"]),
        Route("/v1/admin/clients/{name}/rotate", admin.rotate_client, methods=["POST"]),
        Route("/v1/admin/clients/{name}/revoke", admin.revoke_client, methods=["POST"]),
        Route("/v1/admin/messages/{message_id}/redrive", admin.redrive_message, methods=["POST"]),
        Route("/v1/admin/suppressions", admin.list_suppressions, methods=["GET"]),
        Route("/v1/admin/suppressions/lift", admin.lift_suppression, methods=["POST"]),
        Route("/v1/admin/webhooks", hooks.list, methods=["GET"]),
        Route("/v1/admin/webhooks", hooks.add, methods=["POST"]),
        Route("/v1/admin/webhooks/{endpoint_id}/rotate", hooks.rotate, methods=["POST"]),
        Route("/v1/admin/webhooks/{endpoint_id}/remove", hooks.remove, methods=["POST"]),
    ]
