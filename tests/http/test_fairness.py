"""Tenants share the API fairly: request rates per key and per tenant, and per-tenant turns in a process.

The turns are shown through a real server: tenant acme's creates are held
in the database on an advisory lock that the test holds (the lock of the
user's stream, which a create takes), so they keep their request thread and
their connection for as long as the test wants.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta
from uuid import uuid4

import attrs
import httpx
import pytest
from sqlalchemy import Engine, text
from starlette.applications import Starlette

from domain.fairness import FairnessPolicy
from domain.reset_events import reset_stream
from domain.tenants import scoped_user
from infra.clock import ManualClock
from infra.http.app import create_app
from infra.http.fairness import Fairness
from infra.http.openapi import openapi_document
from infra.services.clients import create_client
from infra.services.locks import stream_lock_id
from infra.services.tenants import create_tenant
from infra.services.unit_of_work import ServiceContext
from tests.http.support import asgi_client, assert_problem, log_size
from tests.support.servers import served
from tests.support.waiting import wait_until

GENEROUS = FairnessPolicy(key_per_second=10_000, key_burst=10_000, tenant_per_second=10_000, tenant_burst=10_000)
STUCK_USER = "stuck"
WAITING_ON_ADVISORY_LOCK = text(
    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'")


def send_keys(ctx: ServiceContext, *tenants: str) -> dict[str, str]:
    keys = {}
    for tenant in tenants:
        create_tenant(ctx, tenant)
        keys[tenant] = create_client(ctx, f"{tenant}-send", tenant=tenant, scopes=["send"]).api_key
    return keys


def create(base: str, key: str, user_id: str) -> httpx.Response:
    return httpx.post(f"{base}/v1/password-resets", json={"user_id": user_id, "email": "someone@example.test"},
                      headers={"Authorization": f"Bearer {key}", "Idempotency-Key": str(uuid4())}, timeout=60)


def fairness_of(app: Starlette) -> Fairness:
    """The app's per-process fairness state (to see that a request is waiting for its turn)."""
    [route] = [r for r in app.routes if getattr(r, "path", None) == "/v1/password-resets"]
    return route.endpoint.__self__.fairness  # type: ignore[attr-defined]


@contextmanager
def stream_held(engine: Engine, tenant: str, user_id: str) -> Iterator[None]:
    """The user's reset stream locked by the test: that user's creates wait in the database until it ends."""
    with engine.connect() as connection:
        lock = {"key": stream_lock_id(reset_stream(scoped_user(tenant, user_id)))}
        connection.execute(text("SELECT pg_advisory_lock(:key)"), lock)
        try:
            yield
        finally:
            connection.execute(text("SELECT pg_advisory_unlock(:key)"), lock)
            connection.commit()


def waiting_in_database(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(WAITING_ON_ADVISORY_LOCK).scalar_one()


def test_a_tenant_at_its_cap_waits_without_a_thread_while_another_tenants_request_is_served_at_once(
    ctx: ServiceContext, engine: Engine
) -> None:
    ctx = attrs.evolve(ctx, fairness=attrs.evolve(GENEROUS, tenant_in_flight=2, in_flight_wait=timedelta(seconds=60)))
    keys = send_keys(ctx, "acme", "shop")
    app = create_app(ctx, threads=3)  # acme's cap of two holds two threads; one is left
    done: list[str] = []
    with served(app, lifespan=True) as base, ThreadPoolExecutor(4) as pool:

        def acme(n: int) -> Future[httpx.Response]:
            future = pool.submit(create, base, keys["acme"], STUCK_USER)
            future.add_done_callback(lambda _: done.append(f"acme {n}"))
            return future

        with stream_held(engine, "acme", STUCK_USER):
            stuck = [acme(1), acme(2)]
            wait_until(lambda: waiting_in_database(engine) == 2, what="acme's two creates to wait in the database")
            third = acme(3)
            wait_until(lambda: fairness_of(app).holding("acme") == 3, what="acme's third create to wait for its turn")

            shop = create(base, keys["shop"], "someone")
            done.append("shop")

            assert shop.status_code == 202, shop.text
            assert waiting_in_database(engine) == 2, "acme's third holds no thread: it never reached the database"
        responses = [future.result() for future in [*stuck, third]]

    assert [r.status_code for r in responses] == [202, 202, 202]
    assert done[0] == "shop" and sorted(done[1:]) == ["acme 1", "acme 2", "acme 3"]
    assert fairness_of(app).holding("acme") == 0, "a tenant with nothing in flight is forgotten"


def test_while_another_tenant_is_active_a_tenant_runs_its_shared_turns_and_all_of_them_once_alone(
    ctx: ServiceContext, engine: Engine
) -> None:
    ctx = attrs.evolve(ctx, fairness=attrs.evolve(GENEROUS, tenant_in_flight=2, shared_in_flight=1,
                                                  in_flight_wait=timedelta(seconds=60)))
    keys = send_keys(ctx, "acme", "shop")
    app = create_app(ctx, threads=4)
    with served(app, lifespan=True) as base, ThreadPoolExecutor(4) as pool:
        with stream_held(engine, "acme", STUCK_USER):
            with stream_held(engine, "shop", STUCK_USER):  # shop is active for as long as its create is held
                shop = pool.submit(create, base, keys["shop"], STUCK_USER)
                wait_until(lambda: waiting_in_database(engine) == 1, what="shop's create to wait in the database")
                first = pool.submit(create, base, keys["acme"], STUCK_USER)
                wait_until(lambda: waiting_in_database(engine) == 2, what="acme's first create to run")
                second = pool.submit(create, base, keys["acme"], STUCK_USER)
                wait_until(lambda: fairness_of(app).holding("acme") == 2, what="acme's second create to ask")

                assert waiting_in_database(engine) == 2, "while shop is active, acme runs its one shared turn"
            assert shop.result().status_code == 202

            # Shop is quiet now: within a sharing window acme has both its turns again, its first still held.
            wait_until(lambda: waiting_in_database(engine) == 2, what="acme's second create to take its other turn")
            assert not first.done() and not second.done()
        assert [first.result().status_code, second.result().status_code] == [202, 202]


def test_a_tenant_over_its_cap_with_no_wait_is_refused_at_once_and_nothing_is_written(
    ctx: ServiceContext, engine: Engine
) -> None:
    ctx = attrs.evolve(ctx, fairness=attrs.evolve(GENEROUS, tenant_in_flight=2, in_flight_wait=timedelta(0)))
    keys = send_keys(ctx, "acme", "shop")
    with served(create_app(ctx)) as base, ThreadPoolExecutor(2) as pool:
        with stream_held(engine, "acme", STUCK_USER):
            stuck = [pool.submit(create, base, keys["acme"], STUCK_USER) for _ in range(2)]
            wait_until(lambda: waiting_in_database(engine) == 2, what="acme's two creates to wait in the database")
            before = log_size(engine)

            refused = create(base, keys["acme"], "another-user")
            served_meanwhile = create(base, keys["shop"], "someone")

            assert log_size(engine) == before + 2, "only shop's create wrote (its request and its email)"
            assert not any(future.done() for future in stuck)
        assert [future.result().status_code for future in stuck] == [202, 202]

    problem = assert_problem(refused, 429, "tenant-busy", "tenant_busy")
    assert refused.headers["Retry-After"] == "1"
    assert "2 of this tenant's requests" in problem["detail"]
    assert served_meanwhile.status_code == 202


@pytest.fixture
def limited(ctx: ServiceContext) -> ServiceContext:
    """Three requests per key and five per tenant, at a second's rate each; the clock moves by hand."""
    return attrs.evolve(ctx, fairness=FairnessPolicy(key_per_second=1, key_burst=3, tenant_per_second=1,
                                                     tenant_burst=5))


@pytest.mark.anyio
async def test_a_key_over_its_rate_is_refused_before_any_write_with_the_rate_in_its_headers(
    limited: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    [key] = send_keys(limited, "acme").values()
    async with asgi_client(limited, key) as api:
        statuses = []
        for n in range(4):
            statuses.append(await api.post("/v1/password-resets", json={"user_id": f"u{n}", "email": "a@b.test"},
                                           headers={"Idempotency-Key": str(uuid4())}))
        before = log_size(engine)
        refused = await api.post("/v1/password-resets", json={"user_id": "u9", "email": "a@b.test"},
                                 headers={"Idempotency-Key": str(uuid4())})
        assert log_size(engine) == before, "a refusal writes nothing"
        clock.advance(timedelta(seconds=1))
        again = await api.post("/v1/password-resets", json={"user_id": "u9", "email": "a@b.test"},
                               headers={"Idempotency-Key": str(uuid4())})

    assert [r.status_code for r in statuses] == [202, 202, 202, 429]
    assert_problem(refused, 429, "rate-limited")
    assert refused.headers["Retry-After"] == "1"
    assert refused.headers["RateLimit-Policy"] == '"per-key";q=3;w=3'
    assert refused.headers["RateLimit"] == '"per-key";r=0;t=1'
    assert again.status_code == 202, "a second later, a token is back"


async def timeline(api: httpx.AsyncClient, key: str) -> httpx.Response:
    return await api.get("/v1/timeline", params={"user_id": "x"}, headers={"Authorization": f"Bearer {key}"})


@pytest.mark.anyio
async def test_each_key_has_its_own_rate_and_a_tenants_keys_together_share_the_tenants(
    limited: ServiceContext,
) -> None:
    create_tenant(limited, "acme")
    create_tenant(limited, "shop")
    acme = [create_client(limited, f"acme-{n}", tenant="acme", scopes=["review"]).api_key for n in range(3)]
    shop = create_client(limited, "shop-review", tenant="shop", scopes=["review"]).api_key
    async with asgi_client(limited, None) as api:  # one app: one process's state
        first = [await timeline(api, acme[0]) for _ in range(4)]
        second = [await timeline(api, acme[1]) for _ in range(3)]
        third = await timeline(api, acme[2])
        other_tenant = await timeline(api, shop)

    assert [r.status_code for r in first] == [200, 200, 200, 429]
    assert first[3].headers["RateLimit-Policy"] == '"per-key";q=3;w=3'
    assert [r.status_code for r in second] == [200, 200, 429], "acme's 5 are spent, whichever key spent them"
    assert second[2].headers["RateLimit-Policy"] == '"per-tenant";q=5;w=5'
    assert third.status_code == 429 and third.headers["RateLimit-Policy"].startswith('"per-tenant"')
    assert other_tenant.status_code == 200, "another tenant's rate is its own"


@pytest.mark.anyio
async def test_a_metrics_key_is_held_to_its_own_rate_only(limited: ServiceContext) -> None:
    create_tenant(limited, "acme")
    review = [create_client(limited, f"acme-{n}", tenant="acme", scopes=["review"]).api_key for n in range(2)]
    metrics = create_client(limited, "acme-metrics", tenant="acme", scopes=["metrics"]).api_key
    async with asgi_client(limited, None) as api:
        spent = [(await timeline(api, key)).status_code for key in review for _ in range(3)]
        scrapes = [(await api.get("/metrics", headers={"Authorization": f"Bearer {metrics}"})).status_code
                   for _ in range(4)]

    assert spent == [200, 200, 200, 200, 200, 429], "the tenant's 5 are spent"
    assert scrapes == [200, 200, 200, 429], "a scrape still gets its key's own 3"


def test_every_operation_a_key_calls_documents_its_429_with_retry_after_and_the_ratelimit_headers() -> None:
    document = openapi_document(max_body_bytes=1024)
    # An API key's operations: the document's default security, or one naming the key. (A provider's webhook
    # proves itself with the provider's own credential or signature: no key, so no key's rate.)
    keyed = [(path, method, described) for path, methods in document["paths"].items()
             for method, described in methods.items()
             if any("apiKey" in scheme for scheme in described.get("security", document["security"]))]

    assert len(keyed) > 10
    for path, method, described in keyed:
        headers = described["responses"]["429"]["headers"]
        assert {"Retry-After", "RateLimit-Policy", "RateLimit"} <= set(headers), (method, path)
