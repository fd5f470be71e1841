"""/metrics per tenant, through the real server: a tenant's metrics key sees its own mail only, the
deployment's series need the operator's key, and no tenant admin can mint either for itself."""

from __future__ import annotations

import re

import httpx
from sqlalchemy import Engine, text

from infra.services.unit_of_work import ServiceContext
from tests.support.replay import assert_projections_match_log
from tests.support.two_tenants import TwoTenants, events_digest, two_tenants

DEPLOYMENT_ONLY = ("authledger_projection_lag_events", "authledger_horizon_age_seconds",
                   "authledger_delivery_in_flight", "authledger_delivery_circuit_state",
                   "authledger_fenced_outcomes_total")


def scrape(world: TwoTenants, key: str) -> str:
    response = httpx.get(world.base + "/metrics", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert response.status_code == 200, response.text
    return response.text


def samples(exposition: str) -> dict[str, float]:
    """Every sample line (name with its labels) and its value."""
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in exposition.splitlines() if line and not line.startswith("#")}


def test_a_tenants_metrics_key_sees_nothing_of_another_tenants_mail_and_the_operator_sees_it_all(
    ctx: ServiceContext, engine: Engine
) -> None:
    with two_tenants(ctx) as world:
        acme, shop = world.acme, world.shop
        shop_before = scrape(world, shop.keys["metrics"])
        for user in ("1", "2", "3"):
            world.request_reset(acme, user, f"user{user}@acme.example")  # queued and delivered

        shop_after = scrape(world, shop.keys["metrics"])
        acme_seen = samples(scrape(world, acme.keys["metrics"]))
        deployment_text = scrape(world, world.operator_key)
        deployment = samples(deployment_text)

        assert shop_after == shop_before, "shop's view does not move when acme sends"
        assert "acme" not in shop_after and not any(name in shop_after for name in DEPLOYMENT_ONLY)
        assert all('tenant="shop"' in name for name in samples(shop_after))
        assert samples(shop_after)['authledger_emails_queued_total{tenant="shop"}'] == 0
        assert acme_seen['authledger_emails_queued_total{tenant="acme"}'] == 3
        assert acme_seen['authledger_emails_sent_total{tenant="acme"}'] == 3
        assert acme_seen['authledger_outbox_messages{tenant="acme",state="sent"}'] == 3
        assert acme_seen['authledger_delivery_latency_seconds_count{tenant="acme"}'] == 3
        assert all('tenant="acme"' in name for name in acme_seen)
        assert deployment["authledger_emails_queued_total"] == 3
        assert deployment['authledger_outbox_messages{state="sent"}'] == 3
        assert all(f"# TYPE {series} " in deployment_text for series in DEPLOYMENT_ONLY)
        assert not any("tenant=" in name for name in deployment)

        world.request_reset(shop, "9", "nine@shop.example")
        shop_seen = samples(scrape(world, shop.keys["metrics"]))
        assert shop_seen['authledger_emails_queued_total{tenant="shop"}'] == 1
        assert samples(scrape(world, world.operator_key))["authledger_emails_queued_total"] == 4
    assert_projections_match_log(engine)


def test_a_tenant_admin_can_mint_neither_an_operator_key_nor_a_scope_it_lacks(
    ctx: ServiceContext, engine: Engine
) -> None:
    with two_tenants(ctx) as world:
        before = events_digest(engine)
        with engine.connect() as connection:
            keys_before = connection.execute(text("SELECT count(*) FROM api_keys")).scalar_one()
        for body in ({"name": "acme-prom", "scopes": ["operator"]},
                     {"name": "acme-dash", "scopes": ["metrics"]},
                     {"name": "acme-all", "scopes": ["admin", "send"]}):
            refused = world.call(world.acme, "admin", "POST", "/v1/admin/clients", body)
            assert refused.status_code == 403, refused.text
            assert refused.json()["type"] == "urn:authledger:problem:forbidden"
        for path in ("/v1/admin/clients/acme-metrics/rotate", "/v1/admin/clients/acme-send/rotate"):
            assert world.call(world.acme, "admin", "POST", path).status_code == 403
        # The operator's client (of the default tenant) is not even visible to another tenant's admin.
        assert world.call(world.acme, "admin", "POST", "/v1/admin/clients/prometheus/revoke", {}).status_code == 404
        assert events_digest(engine) == before
        with engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM api_keys")).scalar_one() == keys_before
        assert "authledger_projection_lag_events" not in scrape(world, world.acme.keys["metrics"])
        assert re.search(r"^# TYPE authledger_projection_lag_events ", scrape(world, world.operator_key), re.M)
