"""Hostile input on every API endpoint: no 5xx, no partial writes, nothing echoed back raw."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine

from infra.services.clients import create_client
from infra.services.unit_of_work import ServiceContext
from tests.http.support import asgi_client, log_size

INJECTIONS = [
    "'; DROP TABLE events; --", "<script>alert(1)</script>", "a@b.c\r\nBcc: evil@example.test",
    "\u202eevil@example.test", "${jndi:ldap://x}", "../../etc/passwd", "\x00", "x" * 20_000, "\x1b[31m",
]
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=60),
    st.sampled_from(INJECTIONS),
)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
fields = st.sampled_from(["user_id", "email", "purpose", "token", "code", "extra"])
bodies = st.one_of(
    st.dictionaries(fields, json_values, max_size=5).map(lambda d: json.dumps(d).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=300),
    st.sampled_from([b"{", b"\xff\xfe{}", b"[" * 5000, b'{"user_id": "1", "email": "a@b.c"' + b" " * 40_000 + b"}"]),
)
ENDPOINTS = [
    "/v1/password-resets", "/v1/password-resets/verify", "/v1/password-resets/consume", "/v1/otp/challenges",
    f"/v1/otp/challenges/{uuid.uuid4()}/verify",
]


def echoed_raw(sent: bytes, answer: str) -> bool:
    """True when a distinctive hostile string came back verbatim."""
    text = sent.decode("utf-8", "replace")
    return any(marker in text and marker in answer for marker in ("<script>", "\r\nBcc", "\x1b[31m"))


async def _post(ctx: ServiceContext, key: str, path: str, body: bytes, idempotency_key: bytes) -> Any:
    async with asgi_client(ctx, key) as client:
        return await client.post(
            path, content=body,
            headers={b"Content-Type": b"application/json", b"Idempotency-Key": idempotency_key},
        )


# Any short text a header can carry: no CR or LF, no surrounding space.
idempotency_keys = st.text(max_size=20).map(lambda k: k.encode("utf-8")).filter(
    lambda k: b"\r" not in k and b"\n" not in k and k.strip() == k)


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(path=st.sampled_from(ENDPOINTS), body=bodies, idempotency_key=st.one_of(st.just(b"k-1"), idempotency_keys))
def test_no_body_on_any_endpoint_causes_a_5xx_or_a_partial_write(
    ctx: ServiceContext, engine: Engine, path: str, body: bytes, idempotency_key: bytes
) -> None:
    key = _key(ctx)
    before = log_size(engine)
    response = asyncio.run(_post(ctx, key, path, body, idempotency_key))
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert response.headers["content-type"] == "application/problem+json"
        assert log_size(engine) == before or (response.status_code in (400, 429) and "verify" in path), response.text
    assert not echoed_raw(body, response.text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.dictionaries(st.sampled_from(["user_id", "request_id", "message_id", "x"]),
                             st.one_of(st.text(max_size=40), st.sampled_from(INJECTIONS)), max_size=3))
def test_the_timeline_refuses_garbage_queries_cleanly(
    ctx: ServiceContext, engine: Engine, query: dict[str, str],
) -> None:
    key = _key(ctx)

    async def get() -> Any:
        async with asgi_client(ctx, key) as client:
            return await client.get("/v1/timeline", params=query)

    response = asyncio.run(get())
    assert response.status_code < 500, response.text
    assert not echoed_raw(json.dumps(query).encode(), response.text)


_keys: dict[str, str] = {}


def _key(ctx: ServiceContext) -> str:
    url = str(ctx.engine.url)
    if url not in _keys:
        _keys[url] = create_client(ctx, "hostile").api_key
    return _keys[url]


def test_a_body_nested_thousands_deep_is_a_400_not_a_crash(ctx: ServiceContext, engine: Engine) -> None:
    response = asyncio.run(_post(ctx, _key(ctx), "/v1/password-resets", b"[" * 5000, b"deep"))
    assert response.status_code == 400
    assert "nested too deeply" in response.json()["detail"]
