"""Reading work on the read replica (AUTHLEDGER_READ_DATABASE_URL): each answer says how far behind it was.

A real streaming standby of a primary of the test's own, started from the
embedded server's binaries, answers for what was written on the primary
once it has replayed it. The primary's own URL given as the "replica"
shows the same notes, 0 s behind and not a standby; no read database shows
nothing extra. Writes never go to the read database.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from datetime import timedelta
from typing import Any
from uuid import UUID

import anyio
import pytest
from attrs import evolve
from sqlalchemy import Engine

from infra.bootstrap import App
from infra.console.app import Console
from infra.db.replica import on_replica
from infra.http.app import create_app
from infra.services.clients import create_client
from infra.services.unit_of_work import ServiceContext
from tests.console.support import Browser, key_of, sign_in
from tests.http.support import asgi_client
from tests.support.cli import Env, cli_env, cli_outcome, process_env, run_cli
from tests.support.incidents import duplicate_emails
from tests.support.replication import Pair, replicated_pair

NOT_A_STANDBY = "read from the read database, 0 s behind: it is not a standby (not in recovery)"
ON_THE_PRIMARY = {"in_recovery": False, "seconds_behind": 0.0}


def cli_json(env: Env, *args: str) -> dict[str, Any]:
    code, out = cli_outcome(env, *args, "--json")
    assert code == 0, out
    answer: dict[str, Any] = json.loads(out)
    return answer


def timeline_json(ctx: ServiceContext, api_key: str, **query: str) -> dict[str, Any]:
    async def get() -> Any:
        async with asgi_client(ctx, api_key) as client:
            return await client.get("/v1/timeline", params=query)

    response = anyio.run(get)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


@pytest.fixture
def incident(ctx: ServiceContext, engine: Engine) -> dict[str, UUID]:
    return duplicate_emails(ctx, engine)


@pytest.fixture
def read_env(env: Env, database_url: str) -> Env:
    """The test's database, named again as the read database."""
    return {**env, "AUTHLEDGER_READ_DATABASE_URL": database_url}


def test_history_and_explain_from_the_primary_named_as_read_database_say_it_is_not_a_standby(
    read_env: Env, incident: dict[str, UUID]
) -> None:
    code, history = cli_outcome(read_env, "history", "--user-id", "42")
    assert code == 0, history
    assert f"({NOT_A_STANDBY})" in history
    explained = cli_json(read_env, "explain", "--request-id", str(incident["second_request"]))
    assert explained["replica"] == ON_THE_PRIMARY
    assert cli_json(read_env, "history", "--user-id", "42")["replica"] == ON_THE_PRIMARY


def test_without_a_read_database_history_explain_and_the_timeline_show_nothing_extra(
    env: Env, ctx: ServiceContext, incident: dict[str, UUID]
) -> None:
    code, history = cli_outcome(env, "history", "--user-id", "42")
    assert code == 0 and "replica" not in history and "read database" not in history, history
    assert "replica" not in cli_json(env, "explain", "--message-id", str(incident["first_message"]))
    key = create_client(ctx, "support").api_key
    assert "replica" not in timeline_json(ctx, key, user_id="42")


def test_the_timeline_read_from_the_read_database_carries_its_lag(
    ctx: ServiceContext, engine: Engine, incident: dict[str, UUID]
) -> None:
    key = create_client(ctx, "support").api_key
    reading = evolve(ctx, replica_engine=on_replica(engine))
    for query in ({"user_id": "42"}, {"request_id": str(incident["first_request"])},
                  {"message_id": str(incident["second_message"])}):
        answer = timeline_json(reading, key, **query)
        assert answer["replica"] == ON_THE_PRIMARY, query
        assert answer["events"] == timeline_json(ctx, key, **query)["events"], "the same events as the primary's"


@pytest.fixture
def console_browser(ctx: ServiceContext, engine: Engine) -> Iterator[Browser]:
    reading = evolve(ctx, replica_engine=on_replica(engine))
    client = Browser(create_app(reading, console=Console(reading, idle=timedelta(minutes=15))))
    yield client
    client.close()


def test_the_console_case_and_outbox_pages_note_the_read_database(
    ctx: ServiceContext, console_browser: Browser, incident: dict[str, UUID]
) -> None:
    sign_in(console_browser, key_of(ctx, "support", "review"))
    case = console_browser.get("/console/case", params={"kind": "user", "id": "42"})
    assert case.status_code == 200 and f"This case was {NOT_A_STANDBY}." in case.text
    outbox = console_browser.get("/console/outbox")
    assert outbox.status_code == 200 and f"This page was {NOT_A_STANDBY}." in outbox.text


def test_audit_verify_on_the_read_database_says_so(read_env: Env, incident: dict[str, UUID]) -> None:
    assert run_cli(read_env, "audit", "seal").exit_code == 0
    code, verified = cli_outcome(read_env, "audit", "verify")
    assert code == 0 and verified.splitlines()[0].startswith("ok: ") and NOT_A_STANDBY in verified, verified
    assert cli_json(read_env, "audit", "verify")["replica"] == ON_THE_PRIMARY


def test_writes_never_go_to_the_read_database(env: Env) -> None:
    unreachable = {**env, "AUTHLEDGER_READ_DATABASE_URL": "postgresql://nobody:hunter2@127.0.0.1:1/nothing"}
    code, out = cli_outcome(unreachable, "reset", "request", "--user-id", "7", "--email", "bo@example.test")
    assert code == 0, out
    code, out = cli_outcome(unreachable, "history", "--user-id", "7")
    assert code != 0 and "database unavailable" in out and "hunter2" not in out and "Traceback" not in out, out
    assert cli_outcome(env, "history", "--user-id", "7")[0] == 0, "the request is on the primary"


@pytest.mark.parametrize("url", ["mysql://ada:s3cr3t@db.example/authledger",
                                 "postgresql://ada:s3cr3t@db.example:99999/authledger"])
def test_a_malformed_read_database_url_is_refused_in_one_line_without_its_password(env: Env, url: str) -> None:
    code, out = cli_outcome({**env, "AUTHLEDGER_READ_DATABASE_URL": url}, "history", "--user-id", "7")
    assert code != 0 and "database URL" in out, out
    assert "s3cr3t" not in out and "Traceback" not in out, out


@pytest.fixture
def pair() -> Iterator[Pair]:
    """A primary with authledger's schema and an asynchronous standby streaming it."""
    with replicated_pair(synchronous=False) as pair:
        assert cli_outcome(cli_env(pair.node_url(pair.primary, "postgres")), "db", "init")[0] == 0
        yield pair


def replica_env(pair: Pair, tmp_path: Path) -> Env:
    """authledger on the primary, reading from the standby."""
    return cli_env(pair.node_url(pair.primary, "postgres"),
                   AUTHLEDGER_READ_DATABASE_URL=pair.node_url(pair.standby, "postgres"),
                   AUTHLEDGER_MAILDIR=str(tmp_path / "maildir"), AUTHLEDGER_RESET_URL="https://app.test/reset")


def test_a_request_made_on_the_primary_is_explained_from_a_streaming_standby_once_replayed(
    pair: Pair, tmp_path: Path
) -> None:
    env = replica_env(pair, tmp_path)
    made = cli_json(env, "reset", "request", "--user-id", "ada", "--email", "ada@example.test")  # on the primary
    assert run_cli(env, "audit", "seal").exit_code == 0
    pair.wait_for_replay(what="the standby to replay the request")

    code, explained = cli_outcome(env, "explain", "--request-id", made["request_id"])
    assert code == 0, explained
    assert f"Reset request {made['request_id']}" in explained
    assert "read from a replica " in explained and " s behind the primary" in explained
    lag = cli_json(env, "explain", "--request-id", made["request_id"])["replica"]
    assert lag["in_recovery"] is True and lag["seconds_behind"] >= 0

    code, verified = cli_outcome(env, "audit", "verify")
    assert code == 0 and verified.startswith("ok: ") and "read from a replica " in verified, verified

    app = App.from_environment(process_env(env))
    try:
        key = create_client(app.services, "support").api_key  # a write, and the key is checked: on the primary
        answer = timeline_json(app.services, key, request_id=made["request_id"])
        assert answer["replica"]["in_recovery"] is True and answer["events"], answer
    finally:
        app.close()


def test_while_the_standby_has_not_replayed_a_request_its_answers_say_how_far_behind_they_are(
    pair: Pair, tmp_path: Path
) -> None:
    env = replica_env(pair, tmp_path)
    first = cli_json(env, "reset", "request", "--user-id", "ada", "--email", "ada@example.test")
    pair.wait_for_replay(what="the standby to replay the first request")
    with pair.replay_paused():
        second = cli_json(env, "reset", "request", "--user-id", "bo", "--email", "bo@example.test")
        pair.wait_for_receipt(what="the standby to receive the second request")

        code, missing = cli_outcome(env, "explain", "--request-id", second["request_id"])
        assert code != 0 and f"no request {second['request_id']} in the log" in missing, missing
        behind = cli_json(env, "explain", "--request-id", first["request_id"])["replica"]
        assert behind["in_recovery"] is True and behind["seconds_behind"] > 0, behind
        code, told = cli_outcome(env, "explain", "--request-id", first["request_id"])
        assert code == 0 and "read from a replica " in told and " 0 s behind" not in told, told
    pair.wait_for_replay(what="the standby to replay the second request")

    caught_up = cli_json(env, "explain", "--request-id", second["request_id"])
    assert caught_up["subject"] == f"request {second['request_id']}" and caught_up["replica"]["in_recovery"] is True
