"""Health, readiness, metrics, the OpenAPI document and the support timeline."""

from __future__ import annotations

from uuid import uuid4

import httpx
import pytest
from sqlalchemy import Engine, text
from starlette.routing import Route

from infra.db.schema import SCHEMA_VERSION
from infra.clock import ManualClock
from infra.http.app import create_app
from infra.http.pages import PAGE_PATHS
from infra.delivery.leases import claim_due
from infra.services.privacy import forget
from infra.services.unit_of_work import ServiceContext
from infra.delivery.worker import Worker
from tests.http.support import assert_problem, token_for
from tests.support.mailers import RecordingMailer

pytestmark = pytest.mark.anyio
ADA = {"user_id": "42", "email": "ada@example.com"}


async def create_reset(api: httpx.AsyncClient, key: str = "r1", body: dict[str, str] = ADA) -> dict[str, str]:
    response = await api.post("/v1/password-resets", json=body, headers={"Idempotency-Key": key})
    assert response.status_code == 202, response.text
    return response.json()


async def create_challenge(api: httpx.AsyncClient, key: str = "o1") -> dict[str, str]:
    response = await api.post("/v1/otp/challenges", json=ADA, headers={"Idempotency-Key": key})
    assert response.status_code == 202, response.text
    return response.json()


def deliver_all(ctx: ServiceContext) -> dict[str, int]:
    return Worker(ctx, RecordingMailer(), sender="authledger <no-reply@app.test>").drain()


async def test_healthz_needs_nothing(ctx: ServiceContext) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(create_app(ctx)), base_url="http://t") as anonymous:
        response = await anonymous.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


async def test_readyz_checks_the_database_and_its_schema_for_a_metrics_key(
    monitor: httpx.AsyncClient, admin_engine: Engine
) -> None:
    ready = await monitor.get("/readyz")
    # An operator's monitor also hears which host runs each once-only role: none, with no serve running here.
    assert ready.status_code == 200 and ready.json() == {
        "status": "ready", "schema_version": SCHEMA_VERSION, "roles": {"catch-up": None, "closed-counts": None},
    }

    with admin_engine.begin() as connection:
        connection.execute(text("DROP TABLE delivery_messages"))
    problem = assert_problem(await monitor.get("/readyz"), 503, "schema-mismatch", "schema_mismatch")
    assert "no table delivery_messages" in problem["detail"] and "authledger db init" in problem["detail"]


async def test_readyz_accepts_a_newer_schema_and_refuses_an_older_one(
    monitor: httpx.AsyncClient, admin_engine: Engine
) -> None:
    with admin_engine.begin() as connection:  # a newer release ran db init: schema.sql only ever adds
        connection.execute(text("INSERT INTO schema_version (version) VALUES (:newer)"), {"newer": SCHEMA_VERSION + 1})
    assert (await monitor.get("/readyz")).status_code == 200

    with admin_engine.begin() as connection:
        connection.execute(text("DELETE FROM schema_version WHERE version >= 2"))
    problem = assert_problem(await monitor.get("/readyz"), 503, "schema-mismatch")
    assert f"schema version 1, not {SCHEMA_VERSION}" in problem["detail"] and "authledger db init" in problem["detail"]


async def test_metrics_count_outbox_states_expirations_and_latencies(
    api: httpx.AsyncClient, monitor: httpx.AsyncClient, ctx: ServiceContext, clock: ManualClock, engine: Engine
) -> None:
    assert (await monitor.get("/metrics")).status_code == 200  # counting starts here
    await create_reset(api)
    await create_challenge(api)
    with engine.begin() as connection:  # a worker claims the reset email, then dies
        claim_due(connection, owner="dead", limit=1, now=clock.now(), policy=ctx.delivery_policy)
    clock.advance(ctx.delivery_policy.lease.total_seconds() + 1)
    assert deliver_all(ctx) == {"sent": 2}

    response = await monitor.get("/metrics")

    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    samples = dict(line.rsplit(" ", 1) for line in response.text.splitlines() if not line.startswith("#"))
    assert samples['authledger_outbox_messages{state="sent"}'] == "2"
    assert samples['authledger_outbox_messages{state="pending"}'] == "0"
    assert samples["authledger_emails_queued_total"] == "2"
    assert samples["authledger_emails_sent_total"] == "2"
    assert samples["authledger_lease_expirations_total"] == "1"
    assert samples["authledger_leases_claimed_total"] == "3"
    # First claims: one at once, one after the lease wait; sends take no time on a hand-moved clock.
    assert samples['authledger_claim_latency_seconds_bucket{le="0.005"}'] == "1"
    assert samples['authledger_claim_latency_seconds_bucket{le="60.0"}'] == "2"
    assert samples["authledger_send_latency_seconds_count"] == "2"
    assert samples['authledger_delivery_latency_seconds_bucket{le="+Inf"}'] == "2"


async def test_the_openapi_document_describes_every_route(ctx: ServiceContext, api: httpx.AsyncClient) -> None:
    document = (await api.get("/openapi.json")).json()
    assert document["openapi"] == "3.1.0"
    served = {
        (method.lower(), route.path)
        for route in create_app(ctx, reset_page=True).routes
        if isinstance(route, Route) and route.path not in PAGE_PATHS  # HTML pages for people, not the API
        for method in route.methods or () if method != "HEAD"
    }
    described = {(method, path) for path, item in document["paths"].items() for method in item}
    assert served == described
    for path, item in document["paths"].items():
        for method, operation in item.items():
            assert any(status.startswith("2") for status in operation["responses"]), (method, path)


class TestTimeline:
    async def test_of_a_user_holds_their_requests_challenges_and_emails_oldest_first(
        self, api: httpx.AsyncClient, ctx: ServiceContext, engine: Engine
    ) -> None:
        reset = await create_reset(api)
        challenge = await create_challenge(api)
        deliver_all(ctx)

        response = await api.get("/v1/timeline", params={"user_id": "42"})

        assert response.status_code == 200
        timeline = response.json()
        assert timeline["user_id"] == "42" and timeline["truncated"] is False
        events = timeline["events"]
        assert [e["position"] for e in events] == sorted(e["position"] for e in events)
        streams = {e["stream"] for e in events}
        assert streams >= {"reset-user:42", "otp-user:42", f"email:{reset['message_id']}",
                           f"email:{challenge['message_id']}"}
        sent = [e for e in events if e["type"] == "ProviderAccepted"]
        assert len(sent) == 2
        issued = next(e for e in events if e["type"] == "OtpChallengeIssued")
        with engine.connect() as connection:
            stored = connection.execute(
                text("SELECT payload, metadata FROM events WHERE global_position = :p"), {"p": issued["position"]}
            ).one()
        assert stored.payload["recipient"].startswith("enc:v1:"), "sealed in the log"
        withheld = {field: "[withheld]" for field, value in stored.payload.items() if str(value).startswith("enc:v1:")}
        assert issued["payload"] == {**stored.payload, **withheld, "recipient": "ada@example.com"}, \
            "as in the log, but the address readable and the other sealed fields withheld"
        assert issued["metadata"] == stored.metadata
        assert issued["metadata"]["client"] == "shop"

    async def test_of_a_user_ends_with_their_erasure(
        self, api: httpx.AsyncClient, ctx: ServiceContext, engine: Engine, clock: ManualClock
    ) -> None:
        await create_reset(api)
        forget(ctx, "42", reason="ticket 4711", metadata={"actor": "cli:dana"})

        events = (await api.get("/v1/timeline", params={"user_id": "42"})).json()["events"]

        [erased] = [e for e in events if e["type"] == "SubjectErased"]
        assert erased["stream"] == "subject:42" and erased["metadata"]["actor"] == "cli:dana"
        assert erased["position"] == max(e["position"] for e in events)

    async def test_of_a_request_holds_its_events_and_its_emails_only(
        self, api: httpx.AsyncClient, ctx: ServiceContext
    ) -> None:
        reset = await create_reset(api)
        await create_challenge(api)
        deliver_all(ctx)
        token = token_for(ctx.engine, reset["request_id"])
        assert (await api.post("/v1/password-resets/consume", json={"token": token})).status_code == 200
        deliver_all(ctx)

        timeline = (await api.get("/v1/timeline", params={"request_id": reset["request_id"]})).json()

        types = [e["type"] for e in timeline["events"]]
        assert types[:2] == ["ResetRequested", "EmailQueued"] and "ResetCompleted" in types
        assert "OtpChallengeIssued" not in types
        assert types.count("ProviderAccepted") == 2, "the link and the password-changed notice"
        assert token not in str(timeline)

    async def test_of_a_message_says_why_it_was_not_sent(
        self, api: httpx.AsyncClient, ctx: ServiceContext, clock: ManualClock
    ) -> None:
        first = await create_reset(api)
        clock.advance(61)
        await create_reset(api, key="r2")
        deliver_all(ctx)

        timeline = (await api.get("/v1/timeline", params={"message_id": first["message_id"]})).json()

        assert timeline["request_id"] == first["request_id"] and timeline["message_id"] == first["message_id"]
        types = [e["type"] for e in timeline["events"]]
        assert types == ["ResetRequested", "EmailQueued", "ResetSuperseded", "LeaseClaimed", "DeliverySkipped"]
        assert timeline["events"][-1]["payload"]["reason"] == "superseded"

    @pytest.mark.parametrize("name", ["request_id", "message_id"])
    async def test_of_an_unknown_id_is_404(self, api: httpx.AsyncClient, name: str) -> None:
        assert_problem(await api.get("/v1/timeline", params={name: str(uuid4())}), 404, "not-found")

    @pytest.mark.parametrize(
        "query", ["", "user_id=1&request_id=00000000-0000-0000-0000-000000000000", "user_id=1&user_id=2",
                  "request_id=nope", "user=1", "user_id=has%20space"],
    )
    async def test_needs_exactly_one_well_formed_parameter(self, api: httpx.AsyncClient, query: str) -> None:
        assert_problem(await api.get(f"/v1/timeline?{query}"), 400, "invalid-query")


async def test_metrics_show_projection_lag_horizon_age_and_fenced_outcomes(
    api: httpx.AsyncClient, monitor: httpx.AsyncClient, engine: Engine
) -> None:
    await create_reset(api)
    with engine.connect() as holder:
        holder.begin()
        holder.execute(text("SELECT pg_current_xact_id()"))  # an open transaction holds the horizon back
        response = await monitor.get("/metrics")
        holder.rollback()

    samples = dict(line.rsplit(" ", 1) for line in response.text.splitlines() if not line.startswith("#"))
    assert float(samples["authledger_horizon_age_seconds"]) > 0, "the open transaction is seen"
    lags = {name: value for name, value in samples.items() if name.startswith("authledger_projection_lag_events{")}
    assert lags and all(float(value) >= 0 for value in lags.values())
    assert samples["authledger_fenced_outcomes_total"] == "0"
