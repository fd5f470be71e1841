"""`authledger outbox retry | stuck | status`: what an operator types when mail is late or lost."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

import attrs
import pytest
from sqlalchemy import Engine, text

from domain.delivery import DeliveryPolicy
from domain.reset import RequestReset
from infra.clock import ManualClock
from infra.delivery.leases import claim_due
from infra.delivery.status import outbox_status, stuck_messages
from infra.delivery.worker import Worker
from infra.eventlog.postgres import PostgresEventStore
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.support.cli import Env, run_cli
from tests.support.mailers import RecordingMailer, RefusingMailer

SENDER = "authledger <no-reply@app.test>"


@pytest.fixture
def env(env: Env) -> Env:
    return {**env, "USER": "alice"}


@pytest.fixture
def past_clock() -> ManualClock:
    """A clock ten minutes back, so that the commands' real clock sees what it records as past."""
    return ManualClock(datetime.now(UTC) - timedelta(minutes=10))


@pytest.fixture
def past(ctx: ServiceContext, past_clock: ManualClock) -> ServiceContext:
    return attrs.evolve(ctx, clock=past_clock)


def events(engine: Engine) -> list[tuple[str, object, dict[str, str]]]:
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT stream_id FROM events ORDER BY global_position")).scalars().all()
        store = PostgresEventStore(connection)
        return [(r.event_type, r.event, r.metadata) for stream in dict.fromkeys(rows) for r in store.load(stream)]


def request(ctx: ServiceContext, user_id: str) -> UUID:
    return request_reset(ctx, RequestReset(user_id, f"user{user_id}@example.test")).message_id


def deliver(ctx: ServiceContext, mailer: RecordingMailer | None = None, failures: int = 0) -> dict[str, int]:
    mailer = mailer or RecordingMailer()
    mailer.fail_next = failures
    return Worker(ctx, mailer, sender=SENDER).drain()


def abandoned(ctx: ServiceContext, user_id: str) -> UUID:
    capped = attrs.evolve(ctx, delivery_policy=DeliveryPolicy(max_attempts=1))
    message_id = request(capped, user_id)
    assert deliver(capped, failures=1) == {"abandoned": 1}
    return message_id


def test_retry_without_yes_shows_the_message_and_writes_nothing_then_yes_redrives_it(
    past: ServiceContext, past_clock: ManualClock, engine: Engine, env: Env
) -> None:
    message_id = abandoned(past, "1")
    before = events(engine)

    preview = run_cli(env, "outbox", "retry", "--message-id", str(message_id), "--reason", "outage over")

    assert preview.exit_code == 0, preview.output
    assert f"{message_id}  abandoned at" in preview.output and "last error: provider busy (421)" in preview.output
    assert "would re-drive 1 message(s); nothing was changed: add --yes" in preview.output
    assert events(engine) == before

    acted = run_cli(env, "outbox", "retry", "--abandoned", "--reason", "outage over", "--yes", "--json")

    assert acted.exit_code == 0, acted.output
    answer = json.loads(acted.stdout)
    assert answer["acted"] and [m["message_id"] for m in answer["messages"]] == [str(message_id)]
    event_type, event, metadata = events(engine)[-1]
    assert event_type == "DeliveryRedriven" and (event.actor, event.reason) == ("cli:alice", "outage over")
    assert metadata["command"] == "outbox retry"
    past_clock.advance(timedelta(minutes=11))  # to the real time of the re-drive
    assert deliver(past) == {"sent": 1}
    verify = run_cli(env, "projections", "verify")
    assert verify.exit_code == 0, verify.output


def test_every_bad_retry_is_a_clear_error_that_writes_nothing(
    past: ServiceContext, engine: Engine, env: Env
) -> None:
    lost, sent = abandoned(past, "1"), request(past, "2")
    assert deliver(past) == {"sent": 1}
    before = events(engine)
    cases = [
        ([f"--message-id={uuid4()}", "--reason=x"], 3, "no message"),
        ([f"--message-id={sent}", "--reason=x"], 2, "is sent: only abandoned or failed messages can be re-driven"),
        ([f"--message-id={lost}"], 2, "Missing option '--reason'"),
        ([f"--message-id={lost}", "--reason=   "], 2, "a re-drive needs a reason"),
        (["--abandoned", "--since=last tuesday", "--reason=x"], 2, "is not an ISO 8601 date or time"),
        (["--reason=x"], 2, "give either --message-id M, or --abandoned [--since T]"),
        ([f"--message-id={lost}", "--abandoned", "--reason=x"], 2, "give either"),
        ([f"--message-id={lost}", "--since=2024-01-01", "--reason=x"], 2, "give either"),
        (["--message-id=not-a-uuid", "--reason=x"], 2, "is not a valid UUID"),
    ]
    for args, exit_code, said in cases:
        for yes in ([], ["--yes"]):
            result = run_cli(env, "outbox", "retry", *args, *yes)
            assert (result.exit_code, "Traceback" in result.output) == (exit_code, False), (args, result.output)
            assert said in result.output, (args, result.output)
    assert events(engine) == before


def test_retry_of_abandoned_says_so_when_there_are_none(engine: Engine, env: Env) -> None:
    result = run_cli(env, "outbox", "retry", "--abandoned", "--since", "2024-01-01", "--reason", "x", "--yes")
    assert result.exit_code == 0 and "no abandoned message to re-drive" in result.output
    assert events(engine) == []


def test_stuck_lists_retries_dead_leases_unclaimed_and_given_up_mail(
    past: ServiceContext, past_clock: ManualClock, engine: Engine, env: Env
) -> None:
    clock = past_clock
    failed = request(past, "1")
    assert deliver(past, RefusingMailer()) == {"failed": 1}
    lost = abandoned(past, "2")
    retrying = request(past, "3")
    assert deliver(past, failures=1) == {"pending": 1}
    dead = request(past, "4")
    with engine.begin() as connection:  # a worker claims it, then dies; the retry above is not due yet
        claims = claim_due(connection, owner="dead-worker", limit=5, now=clock.now(), policy=past.delivery_policy)
    assert [claim.row.message_id for claim in claims] == [dead]
    unclaimed = request(past, "5")
    clock.advance(past.delivery_policy.lease + timedelta(minutes=2))

    stuck = stuck_messages(engine, now=clock.now(), older_than_seconds=60)

    kinds = {m["message_id"]: m for m in stuck}
    assert {kind: sorted(m for m, d in kinds.items() if d["kind"] == kind) for kind in
            ("retrying", "expired_lease", "unclaimed", "given_up")} == {
        "retrying": [str(retrying)], "expired_lease": [str(dead)], "unclaimed": [str(unclaimed)],
        "given_up": sorted([str(failed), str(lost)]),
    }
    assert kinds[str(retrying)]["attempts"] == 1 and kinds[str(retrying)]["last_error"] == "provider busy (421)"
    assert kinds[str(retrying)]["next_attempt_at"] > (clock.now() - timedelta(minutes=3)).isoformat()
    assert kinds[str(dead)]["lease_owner"] == "dead-worker" and kinds[str(dead)]["expired_seconds"] == 120.0
    assert (kinds[str(failed)]["state"], kinds[str(failed)]["last_error"]) == ("failed", "550 no such user")
    assert kinds[str(lost)]["state"] == "abandoned" and kinds[str(lost)]["finished_at"]

    shown = run_cli(env, "outbox", "stuck")
    assert shown.exit_code == 0, shown.output
    for heading in ("Waiting for a retry (1):", "Leases held past their expiry (1):", "Due, never claimed (1):",
                    "Abandoned, failed or outcome unknown (`outbox retry` sends them again) (2):"):
        assert heading in shown.output
    as_json = json.loads(run_cli(env, "outbox", "stuck", "--json").stdout)
    assert sorted(m["kind"] for m in as_json) == ["expired_lease", "given_up", "given_up", "retrying", "unclaimed"]


def test_status_gives_the_oldest_due_message_its_real_age_and_says_when_nothing_is_due(
    past: ServiceContext, past_clock: ManualClock, engine: Engine, env: Env
) -> None:
    ctx, clock = past, past_clock
    nothing = run_cli(env, "outbox", "status")
    assert nothing.exit_code == 0 and "due now    0 (nothing is waiting for a worker)" in nothing.output
    assert "None" not in nothing.output

    retried = request(ctx, "1")
    assert deliver(ctx, failures=1) == {"pending": 1}  # due again within two seconds
    clock.advance(120)
    request(ctx, "2")

    status = outbox_status(engine, now=clock.now())

    assert status["due_now"] == 2 and status["oldest_due_message_id"] == str(retried)
    assert status["oldest_due_queued_seconds"] == 120.0, "its age counts from when it was queued"
    assert 118.0 <= status["oldest_due_seconds"] < 120.0, "and it has been due since its retry time"
    shown = run_cli(env, "outbox", "status").output  # ten minutes later, by the real clock
    assert f"due now    2 (the oldest, {retried}, was queued 10 min " in shown
    assert " ago and has been due for " in shown
