"""Support actions over HTTP: an `admin` key withdraws a user's open links and codes, or sends a fresh one.

Through the whole ASGI stack, the worker delivering to a recording mailer:
a withdrawn link is refused as withdrawn and its queued email is not sent;
a fresh link goes to the address of the user's latest request, recorded as
made by the support key, with the reason, under the limits of any create.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from uuid import uuid4

import httpx
import pytest
from attrs import evolve
from sqlalchemy import Engine

from domain.email import DeliverySkipped, email_stream
from domain.otp_events import OtpChallengeInvalidated, otp_stream
from domain.policy import ResetPolicy
from domain.reset_events import ResetInvalidated, ResetRequested, reset_stream
from domain.support import SUPPORT_REASON
from infra.clock import ManualClock
from infra.delivery.worker import Worker
from infra.eventlog.postgres import PostgresEventStore
from infra.services.clients import create_client
from infra.services.tenants import create_tenant
from infra.services.unit_of_work import ServiceContext
from tests.http.support import asgi_client, assert_problem, code_for, log_size, token_for
from tests.http.test_free_text_rule import REASONS as HOSTILE_REASONS
from tests.http.test_pages import state_of
from tests.support.cli import Env, run_cli
from tests.support.log_reading import stream_events
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log

pytestmark = pytest.mark.anyio

ADA = "ada@example.com"
REASON = "ticket 4711: the user reports a link they did not ask for"
SENDER = "authledger <no-reply@app.test>"


@pytest.fixture
async def support(ctx: ServiceContext) -> AsyncIterator[httpx.AsyncClient]:
    """A client holding a key of the default tenant with the `admin` scope."""
    async with asgi_client(ctx, create_client(ctx, "helpdesk", scopes=["admin"]).api_key) as client:
        yield client


async def reset_for(api: httpx.AsyncClient, user_id: str = "42", email: str = ADA) -> str:
    response = await api.post("/v1/password-resets", json={"user_id": user_id, "email": email},
                              headers={"Idempotency-Key": str(uuid4())})
    assert response.status_code == 202, response.text
    return str(response.json()["request_id"])


def drain(ctx: ServiceContext, mailer: RecordingMailer) -> dict[str, int]:
    return Worker(ctx, mailer, sender=SENDER).drain()


async def test_a_withdrawn_link_is_refused_as_withdrawn_by_support_and_its_queued_email_is_not_sent(
    ctx: ServiceContext, engine: Engine, api: httpx.AsyncClient, support: httpx.AsyncClient
) -> None:
    request_id = await reset_for(api)
    token = token_for(engine, request_id)

    response = await support.post("/v1/users/42/invalidation", json={"reason": REASON})

    assert response.status_code == 200, response.text
    assert response.json() == {"user_id": "42", "invalidated_links": 1, "invalidated_codes": 0,
                               "request_ids": [request_id], "challenge_ids": []}
    refused = assert_problem(await api.post("/v1/password-resets/verify", json={"token": token}), 400, "token-invalid")
    assert refused["detail"] == "The reset link was withdrawn by support."
    mailer = RecordingMailer()
    assert drain(ctx, mailer) == {"skipped": 1}
    assert mailer.emails == []
    [withdrawn] = [e for e in stream_events(engine, reset_stream("42")) if isinstance(e, ResetInvalidated)]
    assert withdrawn.reason == REASON
    [skipped] = [e for e in stream_events(engine, email_stream(_message_of(engine, request_id)))
                 if isinstance(e, DeliverySkipped)]
    assert skipped.reason == "invalidated"
    assert_projections_match_log(engine)


async def test_the_withdrawal_is_on_record_with_the_support_key_and_the_reason(
    engine: Engine, api: httpx.AsyncClient, support: httpx.AsyncClient
) -> None:
    await reset_for(api)
    await support.post("/v1/users/42/invalidation", json={"reason": REASON})

    with engine.connect() as connection:
        [recorded] = [r for r in PostgresEventStore(connection).load(reset_stream("42"))
                      if isinstance(r.event, ResetInvalidated)]
    assert recorded.metadata["client"] == "helpdesk" and recorded.metadata["support_action"] == "invalidate"
    timeline = (await api.get("/v1/timeline", params={"user_id": "42"})).json()["events"]
    [told] = [e for e in timeline if e["type"] == "ResetInvalidated"]
    assert told["payload"]["reason"] == REASON and told["metadata"]["client"] == "helpdesk"


async def test_a_withdrawn_code_is_refused_unchecked_even_when_right(
    ctx: ServiceContext, engine: Engine, api: httpx.AsyncClient, support: httpx.AsyncClient
) -> None:
    created = await api.post("/v1/otp/challenges", json={"user_id": "42", "email": ADA},
                             headers={"Idempotency-Key": str(uuid4())})
    challenge_id = created.json()["challenge_id"]
    code = code_for(engine, challenge_id)

    response = await support.post("/v1/users/42/invalidation", json={"reason": REASON})

    assert response.json()["invalidated_codes"] == 1
    refused = await api.post(f"/v1/otp/challenges/{challenge_id}/verify", json={"code": code, "user_id": "42"})
    assert assert_problem(refused, 400, "code-rejected")["detail"] == "The code was withdrawn by support."
    assert any(isinstance(e, OtpChallengeInvalidated) for e in stream_events(engine, otp_stream("42")))
    assert drain(ctx, RecordingMailer()) == {"skipped": 1}


async def test_an_unknown_user_and_another_tenants_user_are_answered_as_a_user_with_nothing_open(
    ctx: ServiceContext, engine: Engine, api: httpx.AsyncClient, support: httpx.AsyncClient
) -> None:
    create_tenant(ctx, "beta")
    async with asgi_client(ctx, create_client(ctx, "beta-shop", tenant="beta").api_key) as beta:
        theirs = await reset_for(beta, "77")
        await reset_for(api, "42")
        await support.post("/v1/users/42/invalidation", json={"reason": REASON})  # 42 has nothing open now
        before = log_size(engine)

        answers = [await support.post(f"/v1/users/{user}/invalidation", json={"reason": REASON})
                   for user in ("42", "77", "nobody")]

        assert [a.status_code for a in answers] == [200, 200, 200]
        assert [{**a.json(), "user_id": None} for a in answers] == 3 * [
            {"user_id": None, "invalidated_links": 0, "invalidated_codes": 0, "request_ids": [], "challenge_ids": []}]
        assert log_size(engine) == before
        still = await beta.post("/v1/password-resets/verify", json={"token": token_for(engine, theirs)})
        assert still.status_code == 200


@pytest.mark.parametrize("body", [{}, {"reason": ""}, {"reason": "   "}, {"reason": "write to ada@example.com"},
                                  {"reason": "ticket 1", "extra": True}, {"reason": "a\u202eb"}])
async def test_a_missing_blank_or_address_holding_reason_is_refused_and_nothing_is_written(
    body: dict[str, object], engine: Engine, api: httpx.AsyncClient, support: httpx.AsyncClient
) -> None:
    await reset_for(api)
    before = log_size(engine)

    response = await support.post("/v1/users/42/invalidation", json=body)

    assert response.status_code == 400, response.text
    assert log_size(engine) == before


async def test_a_key_without_admin_and_a_malformed_user_id_write_nothing(
    engine: Engine, api: httpx.AsyncClient, support: httpx.AsyncClient
) -> None:
    await reset_for(api)
    before = log_size(engine)

    assert_problem(await api.post("/v1/users/42/invalidation", json={"reason": REASON}), 403, "forbidden")
    assert_problem(await api.post("/v1/users/42/resend", json={"flow": "reset", "reason": REASON}), 403, "forbidden")
    assert_problem(await support.post("/v1/users/a%20b/invalidation", json={"reason": REASON}), 404, "not-found")
    assert log_size(engine) == before


async def test_a_fresh_link_goes_to_the_latest_address_recorded_as_made_by_support(
    ctx: ServiceContext, engine: Engine, api: httpx.AsyncClient, support: httpx.AsyncClient
) -> None:
    first = await reset_for(api)
    await support.post("/v1/users/42/invalidation", json={"reason": REASON})

    response = await support.post("/v1/users/42/resend", json={"flow": "reset", "reason": REASON})

    assert response.status_code == 202, response.text
    body = response.json()
    assert body["flow"] == "reset" and body["reused"] is False and body["request_id"] != first
    mailer = RecordingMailer()
    assert drain(ctx, mailer) == {"sent": 1, "skipped": 1}
    [email] = mailer.emails
    assert email.recipient == ADA
    with engine.connect() as connection:
        made = [r for r in PostgresEventStore(connection).load(reset_stream("42"))
                if isinstance(r.event, ResetRequested)]
    assert str(made[-1].event.request_id) == body["request_id"]
    assert made[-1].metadata[SUPPORT_REASON] == REASON and made[-1].metadata["client"] == "helpdesk"
    assert SUPPORT_REASON not in made[0].metadata
    verified = await api.post("/v1/password-resets/verify", json={"token": token_for(engine, body["request_id"])})
    assert verified.status_code == 200


async def test_a_fresh_code_takes_its_purpose_and_a_reset_link_takes_none(
    ctx: ServiceContext, engine: Engine, api: httpx.AsyncClient, support: httpx.AsyncClient
) -> None:
    await reset_for(api)
    before = log_size(engine)
    refused = await support.post("/v1/users/42/resend", json={"flow": "reset", "purpose": "login", "reason": REASON})
    assert_problem(refused, 400, "invalid-input")
    assert log_size(engine) == before

    response = await support.post("/v1/users/42/resend", json={"flow": "otp", "purpose": "login", "reason": REASON})

    assert response.status_code == 202, response.text
    challenge_id = response.json()["challenge_id"]
    verified = await api.post(f"/v1/otp/challenges/{challenge_id}/verify",
                              json={"code": code_for(engine, challenge_id), "user_id": "42"})
    assert verified.status_code == 200


async def test_a_user_with_no_request_on_record_gets_nothing_and_a_404(
    engine: Engine, support: httpx.AsyncClient
) -> None:
    before = log_size(engine)

    response = await support.post("/v1/users/nobody/resend", json={"flow": "reset", "reason": REASON})

    assert_problem(response, 404, "not-found")
    assert log_size(engine) == before


async def test_a_fresh_link_meets_the_limits_of_any_create(
    ctx: ServiceContext, engine: Engine, clock: ManualClock, api_key: str
) -> None:
    limited = evolve(ctx, reset_policy=ResetPolicy(cooldown=timedelta(0), hourly_limit=2))
    admin = create_client(limited, "helpdesk", scopes=["admin"]).api_key
    async with asgi_client(limited, api_key) as api, asgi_client(limited, admin) as support:
        await reset_for(api)
        clock.advance(1)
        assert (await support.post("/v1/users/42/resend", json={"flow": "reset", "reason": REASON})).status_code == 202
        clock.advance(1)
        before = log_size(engine)

        response = await support.post("/v1/users/42/resend", json={"flow": "reset", "reason": REASON})

        assert_problem(response, 429, "rate-limited")
        assert [type(e).__name__ for e in stream_events(engine, reset_stream("42"))][-1] == "ResetRequestRefused"
        assert log_size(engine) == before + 1  # the refusal, recorded as any create's is


def _message_of(engine: Engine, request_id: str) -> object:
    [made] = [e for e in stream_events(engine, reset_stream("42"))
              if isinstance(e, ResetRequested) and str(e.request_id) == request_id]
    return made.message_id


async def test_the_stand_in_reset_page_names_a_withdrawn_link_and_offers_no_button(
    ctx: ServiceContext, engine: Engine, api: httpx.AsyncClient, support: httpx.AsyncClient
) -> None:
    request_id = await reset_for(api)
    await support.post("/v1/users/42/invalidation", json={"reason": REASON})

    async with asgi_client(ctx, None, reset_page=True) as person:
        page = await person.get("/reset", params={"token": token_for(engine, request_id)})

    assert state_of(page) == "invalidated" and "<form" not in page.text
    assert "The reset link was withdrawn by support." in page.text


@pytest.mark.parametrize("reason", HOSTILE_REASONS.values(), ids=HOSTILE_REASONS.keys())
async def test_the_api_and_the_cli_refuse_a_reason_hiding_an_address_or_bidi_alike_and_write_nothing(
    env: Env, engine: Engine, api: httpx.AsyncClient, support: httpx.AsyncClient, reason: str
) -> None:
    await reset_for(api)
    before = log_size(engine)

    answers = [await support.post("/v1/users/42/invalidation", json={"reason": reason}),
               await support.post("/v1/users/42/resend", json={"flow": "reset", "reason": reason})]
    runs = [run_cli(env, "users", "invalidate", "--user-id", "42", "--reason", reason),
            run_cli(env, "users", "resend", "--user-id", "42", "--flow", "reset", "--reason", reason)]

    details = {assert_problem(answer, 400, "invalid-input")["detail"] for answer in answers}
    assert len(details) == 1
    assert {(run.exit_code, run.output) for run in runs} == {(2, f"Error: {details.pop()}\n")}
    assert "example.com" not in "".join(a.text for a in answers) + "".join(run.output for run in runs)
    assert log_size(engine) == before
