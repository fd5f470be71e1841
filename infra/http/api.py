"""The API's route handlers (``Api``): password resets, OTP, the timeline, erasure and operations.

Handlers are thin: check the headers and the key, read and check the body, then run the
database work (authenticate the key, call the service) in Starlette's
threadpool, where the sync SQLAlchemy pool lives. What they raise becomes a
problem+json response in ``infra.http.problems``, by the exception handlers
that ``infra.http.app`` installs. The admin handlers (``infra.http.admin``)
and the support actions (``infra.http.support``) share the steps of ``Api``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from uuid import UUID

from sqlalchemy import text
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from domain.clients import OPERATOR, Caller
from domain.decisions import RequestOutcome
from domain.errors import AuthledgerError, NotFound
from domain.otp import RequestOtp
from domain.reset import RequestReset
from domain.tenants import split_scoped_user
from infra.db import tables
from infra.db.leadership import holders
from infra.db.reading import reading
from infra.db.schema import SCHEMA_VERSION, current_version
from infra.delivery.worker import Worker
from infra.errors import DatabaseUnavailable, Forbidden, ReadOnlyStandby, SchemaMismatch, Unauthorized
from infra.http import schemas
from infra.http.fairness import Fairness
from infra.http.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from infra.http.metrics import LogMetrics, render
from infra.http.openapi import openapi_document
from infra.http.problems import InvalidQuery, safe_json
from infra.http.validation import bearer_key, canonical_uuid, idempotency_key, read_json, single_query
from infra.review.timeline import message_timeline, request_timeline, user_timeline
from infra.services import otp as otp_service, reset as reset_service
from infra.services.clients import authenticate
# What POST /v1/users/{user_id}/erasure does once the key holds admin; the console's erase form calls it too.
from infra.services.privacy import erase_user
from infra.services.unit_of_work import ServiceContext

CONNECTED = text("SELECT pg_is_in_recovery()")  # true on a standby: it answers, and refuses every write
USER_ID = re.compile(schemas.USER_ID["pattern"].strip("^$"))
MISSING_TABLES = text("SELECT name FROM unnest(CAST(:names AS text[])) AS name WHERE to_regclass(name) IS NULL")
REPLAYED = "Idempotency-Replayed"
MONITORING = ("metrics", OPERATOR)  # /metrics and /readyz's details: a tenant's view or the deployment's


def _json(data: dict[str, Any], status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(safe_json(data), status_code=status_code, headers=headers, media_type="application/json")


def _accepted(data: dict[str, Any], outcome: RequestOutcome) -> Response:
    """A create's 202: ``data`` with ``reused``, and ``Idempotency-Replayed: true`` on a replay of the key."""
    headers = {REPLAYED: "true"} if outcome.replayed else None
    return _json({**data, "message_id": str(outcome.message_id), "expires_at": outcome.expires_at.isoformat(),
                  "reused": outcome.reused}, 202, headers)


class Api:
    """The handlers, bound to one ``ServiceContext``."""

    def __init__(self, ctx: ServiceContext, *, max_body_bytes: int, worker: Worker | None = None) -> None:
        self.ctx = ctx
        self.worker = worker
        self.max_body_bytes = max_body_bytes
        self.log_metrics = LogMetrics()
        self.fairness = Fairness(ctx.fairness, ctx.clock)
        self.document = openapi_document(max_body_bytes=max_body_bytes)

    # -- shared steps ---------------------------------------------------------------------------

    def _caller(self, api_key: str, scope: str | tuple[str, ...]) -> Caller:
        """Who holds ``api_key``, when it holds ``scope`` (or one of several); 401 or 403 otherwise."""
        caller = authenticate(self.ctx.engine, api_key)
        if caller is None:
            raise Unauthorized("the API key is unknown or revoked")
        needed = (scope,) if isinstance(scope, str) else scope
        if not any(caller.may(one) for one in needed):
            raise Forbidden(f"this API key lacks the {' or '.join(map(repr, needed))} scope that this operation needs")
        return caller

    def _metadata(self, request: Request, caller: Caller) -> dict[str, str]:
        """What every event the call appends carries: the client and which of its keys (its public id) acted."""
        request_id = request.state.request_id
        return {"client": caller.client, "key_id": caller.key_id, "actor": f"client:{caller.client}",
                "request_id": request_id, "correlation_id": request_id}

    async def _checked(self, request: Request, schema: schemas.Schema, *, create: bool = False
                       ) -> tuple[dict[str, Any], str | None]:
        """The key, then the body (and a create's Idempotency-Key), checked before any write: nothing is written.

        The key is looked up before a byte of the body is read: a client without a working key is answered 401
        at once, and can make the server neither wait for a body nor hold one (``infra.http.deadlines``).
        """
        api_key = bearer_key(request)  # 401 first when there is no key at all
        if await run_in_threadpool(authenticate, self.ctx.engine, api_key) is None:  # cached: _authenticated's
            raise Unauthorized("the API key is unknown or revoked")  # look-up then costs nothing
        key = idempotency_key(request) if create else None
        return await read_json(request, schema, limit=self.max_body_bytes), key

    async def _authenticated(self, request: Request, scope: str | tuple[str, ...],
                             work: Callable[[Caller], Any]) -> Any:
        """Run ``work(caller)`` in the threadpool after checking there that the key holds ``scope`` (or one of
        them), and here that it is within its rates and has its tenant's turn."""
        api_key = bearer_key(request)
        caller = await run_in_threadpool(self._caller, api_key, scope)
        request.state.client = caller.client  # for the request's log line, with the key's id
        request.state.key_id = caller.key_id
        scopes = (scope,) if isinstance(scope, str) else scope
        # Rates and the tenant's turn are taken here, between two threadpool calls: a request waiting for
        # its turn holds no thread and no connection (infra.http.fairness). A scrape is held to its key's rate.
        async with self.fairness.admitted(caller, tenant_wide="metrics" not in scopes):
            return await run_in_threadpool(work, caller)

    # -- password resets ------------------------------------------------------------------------

    async def create_reset(self, request: Request) -> Response:
        body, key = await self._checked(request, schemas.RESET_CREATE, create=True)
        outcome = await self._authenticated(request, "send", lambda caller: reset_service.request_reset(
            self.ctx, RequestReset(body["user_id"], body["email"], key, caller.client, caller.tenant,
                                   body.get("locale")),
            self._metadata(request, caller),
            in_flight="refuse", client_ip=body.get("client_ip")))
        return _accepted({"request_id": str(outcome.request_id)}, outcome)

    async def verify_reset(self, request: Request) -> Response:
        body, _ = await self._checked(request, schemas.TOKEN_BODY)
        found = await self._authenticated(request, "verify", lambda caller: reset_service.verify_token(
            self.ctx, body["token"], self._metadata(request, caller), tenant=caller.tenant,
            client_ip=body.get("client_ip")))
        return _json({"valid": True, "request_id": str(found.request_id), "user_id": _local(found.user_id),
                      "expires_at": found.expires_at.isoformat()})

    async def consume_reset(self, request: Request) -> Response:
        body, _ = await self._checked(request, schemas.TOKEN_BODY)
        outcome = await self._authenticated(request, "verify", lambda caller: reset_service.consume_token(
            self.ctx, body["token"], self._metadata(request, caller), tenant=caller.tenant,
            client_ip=body.get("client_ip")))
        return _json({"consumed": True, "request_id": str(outcome.request_id), "user_id": _local(outcome.user_id),
                      "completed_at": outcome.completed_at.isoformat()})

    # -- OTP ------------------------------------------------------------------------------------

    async def create_challenge(self, request: Request) -> Response:
        body, key = await self._checked(request, schemas.OTP_CREATE, create=True)
        outcome = await self._authenticated(request, "send", lambda caller: otp_service.request_otp(
            self.ctx, RequestOtp(body["user_id"], body["email"], body.get("purpose", "login"), key, caller.client,
                                 caller.tenant, body.get("locale")),
            self._metadata(request, caller), in_flight="refuse", client_ip=body.get("client_ip")))
        return _accepted({"challenge_id": str(outcome.request_id)}, outcome)

    async def verify_challenge(self, request: Request) -> Response:
        challenge_id = _path_uuid(request.path_params["challenge_id"], "challenge")
        body, _ = await self._checked(request, schemas.CODE_BODY)
        await self._authenticated(request, "verify", lambda caller: otp_service.verify_code(
            self.ctx, challenge_id, body["code"], self._metadata(request, caller), user_id=body["user_id"],
            purpose=body.get("purpose"), tenant=caller.tenant, client_ip=body.get("client_ip")))
        return _json({"verified": True, "challenge_id": str(challenge_id)})

    # -- support and operations -----------------------------------------------------------------

    async def timeline(self, request: Request) -> Response:
        bearer_key(request)
        query = single_query(request, schemas.TIMELINE_SUBJECTS)
        if len(query) != 1:
            raise InvalidQuery("give exactly one of user_id, request_id or message_id")
        [(name, value)] = query.items()

        def work(caller: Caller) -> Any:
            if name == "user_id":
                return user_timeline(self.ctx, value, tenant=caller.tenant)
            finder = request_timeline if name == "request_id" else message_timeline
            return finder(self.ctx, UUID(value), tenant=caller.tenant)  # single_query held it to the canonical form

        found = await self._authenticated(request, "review", work)
        return _json(found.as_json())

    async def erase_user(self, request: Request) -> Response:
        user_id = path_user(request.path_params["user_id"])
        body, _ = await self._checked(request, schemas.ERASURE_BODY)
        erasure = await self._authenticated(request, "admin", lambda caller: erase_user(
            self.ctx, caller, user_id, body["reason"], self._metadata(request, caller)))
        return _json({**erasure.as_dict(), "user_id": user_id})

    async def healthz(self, request: Request) -> Response:
        return _json({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        # Anyone may ask whether the database answers; how it stands (schema
        # version, missing tables) is told only to a key with the metrics scope.
        if "authorization" not in request.headers:
            await run_in_threadpool(self._check_connected)
            return _json({"status": "ready"})
        roles = await self._authenticated(request, MONITORING, self._check_ready)
        return _json({"status": "ready", "schema_version": SCHEMA_VERSION, **roles})

    def _check_connected(self) -> None:
        try:
            with reading(self.ctx.engine) as connection:
                standby = connection.execute(CONNECTED).scalar_one()
        except AuthledgerError:
            raise DatabaseUnavailable() from None
        if standby:
            raise ReadOnlyStandby()

    def _check_ready(self, caller: Caller) -> dict[str, Any]:
        """Nothing when ready (``SchemaMismatch`` otherwise); for an operator, which host runs which role."""
        with reading(self.ctx.engine) as connection:
            if connection.execute(CONNECTED).scalar_one():
                raise ReadOnlyStandby()
            version = current_version(connection)
            missing = connection.execute(MISSING_TABLES, {"names": list(tables.metadata.tables)}).scalars().all()
            # The deployment's hosts are the operator's to see, not a tenant's.
            roles = {"roles": holders(connection)} if caller.may(OPERATOR) else {}
        # A newer schema is fine: schema.sql only ever adds, so during a rolling
        # deploy the old release stays ready after the new one ran db init.
        problems = [] if version is not None and version >= SCHEMA_VERSION else [
            "no authledger schema" if version is None else f"schema version {version}, not {SCHEMA_VERSION}"
        ]
        problems += [f"no table {name}" for name in missing]
        if problems:
            raise SchemaMismatch(f"the database is not ready: {'; '.join(problems)}; run `authledger db init`")
        return roles

    def start_metrics(self) -> None:
        with self.ctx.engine.connect() as connection:
            self.log_metrics.start(connection)

    async def metrics(self, request: Request) -> Response:
        # Counters move when an email is queued: for an outsider, an oracle of
        # who just asked for a reset. Prometheus scrapes with a bearer token,
        # and a tenant's metrics key sees its own tenant's series only; the
        # deployment as a whole is for an operator key (infra.http.metrics).
        exposition = await self._authenticated(request, MONITORING, lambda caller: render(
            self.ctx, self.log_metrics, self.worker, tenant=None if caller.may(OPERATOR) else caller.tenant))
        return Response(exposition, media_type=METRICS_CONTENT_TYPE)

    async def openapi(self, request: Request) -> Response:
        return _json(self.document)


def _local(scoped_user_id: str) -> str:
    """The user id as the caller's tenant knows it: responses never show the scoped id."""
    return split_scoped_user(scoped_user_id)[1]

def path_user(value: str) -> str:
    """A user id from a path (erasure, support actions); ``NotFound`` for one no user can have."""
    if len(value) > schemas.USER_ID["maxLength"] or not USER_ID.fullmatch(value):
        raise NotFound("no such user: a user id is 1-200 printable ASCII characters, no spaces")
    return value


def _path_uuid(value: str, what: str) -> UUID:
    found = canonical_uuid(value)
    if found is None:
        raise NotFound(f"no {what} {value!r}: ids are UUIDs like 123e4567-e89b-12d3-a456-426614174000")
    return found
