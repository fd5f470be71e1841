"""`history`, `explain` and `GET /v1/timeline` answer from one lookup, so they name the same events.

The scenario has what makes incident review hard: a request superseded
twice, a worker killed while sending (its lease expires, a second worker
claims the email again) and an erasure that stops an email still waiting.
The catch-up index is made current halfway through, so that every answer
is read partly from ``audit_index`` and partly from the log past it.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

import anyio
from sqlalchemy import Engine, text

from domain.reset import RequestReset
from infra.services.clients import create_client
from infra.services.privacy import forget
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.http.support import asgi_client
from tests.support.cli import Env, run_cli
from tests.support.incidents import WEB, SmtpMailer, at, deliver_due, duplicate_emails, incident_context


def cli_json(env: Env, *args: str) -> dict[str, Any]:
    result = run_cli(env, *args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def cli_positions(env: Env, *args: str) -> list[int]:
    return [entry["global_position"] for entry in cli_json(env, *args)["timeline"]]


def http_positions(ctx: ServiceContext, api_key: str, **query: str) -> list[int]:
    async def get() -> Any:
        async with asgi_client(ctx, api_key) as client:
            return await client.get("/v1/timeline", params=query)

    response = anyio.run(get)
    assert response.status_code == 200, response.text
    return [event["position"] for event in response.json()["events"]]


def event_ids(engine: Engine, positions: list[int]) -> list[UUID]:
    with engine.connect() as connection:
        ids = dict(connection.execute(text("SELECT global_position, event_id FROM events "
                                           "WHERE global_position = ANY(:p)"), {"p": positions}).all())
    return [ids[position] for position in positions]


def event_types(engine: Engine, positions: list[int]) -> list[str]:
    with engine.connect() as connection:
        types = dict(connection.execute(text("SELECT global_position, event_type FROM events "
                                             "WHERE global_position = ANY(:p)"), {"p": positions}).all())
    return [types[position] for position in positions]


def superseded_killed_and_erased(ctx: ServiceContext, engine: Engine, env: Env) -> dict[str, UUID]:
    """User 42 asks twice while a worker dies mid-send, asks a third time, and is forgotten before that email goes."""
    ids = duplicate_emails(ctx, engine)
    cli_json(env, "projections", "run", "--once")  # the index is current up to here
    ctx, clock = incident_context(ctx, 0xE00)
    at(clock, "10:03:30")
    third = request_reset(ctx, RequestReset("42", "ada@example.test"), WEB)
    at(clock, "10:04:00")
    forget(ctx, "42", reason="ticket 4711", metadata={"actor": "cli:dana"})
    at(clock, "10:04:01")
    deliver_due(ctx, SmtpMailer(), "w3")
    return {**ids, "third_request": third.request_id, "third_message": third.message_id}


def test_history_explain_and_the_http_timeline_name_the_same_events_in_the_same_order(
    ctx: ServiceContext, engine: Engine, env: Env
) -> None:
    ids = superseded_killed_and_erased(ctx, engine, env)
    api_key = create_client(ctx, "support").api_key
    assert cli_json(env, "history", "--user-id", "42")["unindexed_events"] > 0, "half read from the log"

    user = cli_positions(env, "history", "--user-id", "42")
    assert user == http_positions(ctx, api_key, user_id="42")
    assert event_ids(engine, user) == event_ids(engine, http_positions(ctx, api_key, user_id="42"))
    types = event_types(engine, user)
    assert types.count("ResetSuperseded") == 2 and "SubjectErased" in types
    assert types[-2:] == ["LeaseClaimed", "DeliverySkipped"], "the erasure stopped the third email"

    for name in ("first_request", "second_request", "third_request"):
        request = cli_positions(env, "explain", "--request-id", str(ids[name]))
        assert request, name
        assert request == http_positions(ctx, api_key, request_id=str(ids[name])), name
        assert set(request) <= set(user), name
    for name in ("first_message", "second_message", "third_message"):
        message = cli_positions(env, "explain", "--message-id", str(ids[name]))
        assert message, name
        assert message == http_positions(ctx, api_key, message_id=str(ids[name])), name
        assert set(message) <= set(user), name
        if name == "second_message":
            assert event_types(engine, message).count("LeaseClaimed") == 2, "claimed again after w1 died"


def test_the_answers_stay_the_same_once_the_index_has_caught_up(
    ctx: ServiceContext, engine: Engine, env: Env
) -> None:
    ids = superseded_killed_and_erased(ctx, engine, env)
    api_key = create_client(ctx, "support").api_key
    before = {name: http_positions(ctx, api_key, **{name.split("_")[1] + "_id": str(ids[name])})
              for name in ("first_request", "second_message", "third_message")}
    user_before = http_positions(ctx, api_key, user_id="42")

    cli_json(env, "projections", "run", "--once")

    assert cli_json(env, "history", "--user-id", "42")["unindexed_events"] == 0
    assert http_positions(ctx, api_key, user_id="42") == user_before
    for name, positions in before.items():
        assert http_positions(ctx, api_key, **{name.split("_")[1] + "_id": str(ids[name])}) == positions
