"""Support actions over HTTP, for a key with the ``admin`` scope, on a user of its own tenant.

``POST /v1/users/{user_id}/invalidation`` withdraws the user's open links
and codes; ``POST /v1/users/{user_id}/resend`` sends them a fresh link or
code to the address of their latest request. Both are
``infra.services.support``'s, recorded with the key's client and id in the
events' metadata and the reason given. The user id is the tenant's own:
another tenant's user is not one of the caller's, so an invalidation
answers it as any user with nothing open (zero counts, nothing written),
and a resend as a user with no request on record (404).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from domain.clients import Caller
from infra.http import schemas
from infra.http.admin import ADMIN, Steps
from infra.http.api import path_user
from infra.http.problems import safe_json
from infra.services.support import invalidate_user, resend


def _json(data: Any, status_code: int = 200) -> Response:
    return Response(safe_json(data), status_code=status_code, media_type="application/json")


class Support:
    """The support handlers, over the API's shared steps."""

    def __init__(self, api: Steps) -> None:
        self.api = api

    async def invalidate(self, request: Request) -> Response:
        user_id = path_user(request.path_params["user_id"])
        body, _ = await self.api._checked(request, schemas.INVALIDATION_BODY)

        def work(caller: Caller) -> Any:
            return invalidate_user(self.api.ctx, caller.tenant, user_id, reason=body["reason"],
                                   metadata=self.api._metadata(request, caller))

        invalidation = await self.api._authenticated(request, ADMIN, work)
        return _json(invalidation.as_dict())

    async def resend(self, request: Request) -> Response:
        user_id = path_user(request.path_params["user_id"])
        body, _ = await self.api._checked(request, schemas.RESEND_BODY)

        def work(caller: Caller) -> Any:
            return resend(self.api.ctx, caller.tenant, user_id, flow=body["flow"], reason=body["reason"],
                          purpose=body.get("purpose"), client=caller.client,
                          metadata=self.api._metadata(request, caller))

        resent = await self.api._authenticated(request, ADMIN, work)
        return _json(resent.as_dict(), 202)


def support_routes(support: Support) -> list[Route]:
    return [
        Route("/v1/users/{user_id}/invalidation", support.invalidate, methods=["POST"]),
        Route("/v1/users/{user_id}/resend", support.resend, methods=["POST"]),
    ]
