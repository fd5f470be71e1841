"""The outermost ASGI layer of every request: its id, its one log line, and the last-resort 500."""

from __future__ import annotations

import logging
import re
import time
import uuid

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from infra.http import schemas
from infra.http.problems import InternalError, InvalidRequestId, problem_response
from infra.logs import FIELDS, log_event

log = logging.getLogger("authledger.http")
REQUEST_ID = re.compile(schemas.REQUEST_ID_PATTERN.strip("^$"))


class RequestContext:
    """Outermost layer: the request id, one log line per request, and the last-resort 500.

    Errors the handlers raise are turned into problems by the exception
    handlers of ``create_app`` (``infra.http.app``); whatever escapes them is a
    bug, answered with a 500 that says nothing and logged with its traceback.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), 500
        given = Request(scope).headers.getlist("x-request-id")
        valid = len(given) == 1 and REQUEST_ID.fullmatch(given[0]) is not None
        request_id = given[0] if valid else uuid.uuid4().hex
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        response_started = False

        async def send_with_id(message: Message) -> None:
            nonlocal response_started, status
            if message["type"] == "http.response.start":
                response_started, status = True, message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
            await send(message)

        try:
            if given and not valid:
                error = InvalidRequestId("X-Request-Id must be one value of 1-128 of A-Z a-z 0-9 . _ : @ / + = -")
                await problem_response(error)(scope, receive, send_with_id)
            else:
                await self.app(scope, receive, send_with_id)
        except Exception:
            log.exception("unhandled error", extra={FIELDS: {"request_id": request_id}})
            if not response_started:
                await problem_response(InternalError())(scope, receive, send_with_id)
        finally:
            log_event(log, "http request", method=scope["method"], path=scope["path"], status=status,
                      ms=round((time.perf_counter() - started) * 1000, 1), request_id=request_id,
                      client=state.get("client"), key_id=state.get("key_id"))
