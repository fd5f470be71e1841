"""The delivery hot path is set-based: a claim, a group's fresh read (its streams, and its tenants' settings) and a
group's outcomes each cost a fixed number of statements, whatever the group's size."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from uuid import UUID, uuid4

import psycopg
from sqlalchemy import Engine, text

from domain.delivery import LeaseView, claim_events
from domain.email import ProviderAccepted, email_stream
from domain.reset import RequestReset
from infra.clock import ManualClock
from infra.delivery.fresh import prepare_all
from infra.delivery.leases import claim_due, record_outcomes
from infra.eventlog.codec import default_codec
from infra.eventlog.postgres import PostgresEventStore
from infra.projector.inline import OUTBOX
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from infra.services.webhook_routes import ENDPOINTS
from tests.support.statements import statements_sent
from tests.support.replay import assert_projections_match_log

SENDER = "authledger <no-reply@app.test>"


def queue(ctx: ServiceContext, count: int) -> list[UUID]:
    return [request_reset(ctx, RequestReset(f"user-{n}", f"u{n}@example.test")).message_id for n in range(count)]


def stored_events(engine: Engine, message_id: UUID) -> list[dict]:
    with engine.connect() as connection:
        rows = connection.execute(
            text("SELECT event_type, schema_version, payload, metadata FROM events "
                 "WHERE stream_id = :s ORDER BY stream_version"), {"s": email_stream(message_id)})
        return [dict(row._mapping) for row in rows]


def test_a_claim_of_many_messages_is_one_statement_writing_what_the_python_path_would(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    clock.advance(timedelta(microseconds=123_457))  # timestamps with and without microseconds
    messages = queue(ctx, 5)
    with engine.begin() as connection:  # two of them claimed by a worker that then dies
        claim_due(connection, owner="dead", limit=2, now=clock.now(), policy=ctx.delivery_policy)
    clock.advance(ctx.delivery_policy.lease + timedelta(seconds=1) - timedelta(microseconds=123_457))
    with engine.connect() as connection:
        before = OUTBOX.load(connection, messages)
    tokens = [uuid4() for _ in range(10)]

    with engine.connect() as connection, connection.begin():
        with statements_sent(connection) as sent:
            claims = claim_due(connection, owner="w1", limit=10, now=clock.now(), policy=ctx.delivery_policy,
                               new_token=iter(tokens).__next__)

    assert len(sent) == 1
    # In order of availability: the dead worker's two fell due when their leases ran out.
    assert [c.row.message_id for c in claims] == messages[2:] + messages[:2]
    assert [c.lease_token for c in claims] == tokens[:5]
    codec = default_codec()
    for claim in claims:
        old = before[claim.row.message_id]
        view = LeaseView(old.message_id, old.state, old.lease_owner, old.lease_token, old.attempt_count)
        expected = claim_events(view, owner="w1", lease_token=claim.lease_token, now=clock.now(),
                                policy=ctx.delivery_policy)
        written = stored_events(engine, claim.row.message_id)[-len(expected):]
        assert [(w["event_type"], w["schema_version"], w["payload"]) for w in written] == [
            (tag, version, json.loads(json.dumps(payload)))
            for tag, version, payload in (codec.encode(e) for e in expected)
        ]
        assert all(w["metadata"] == {"actor": "w1"} for w in written)
        decoded = PostgresEventStore(engine.connect()).load(email_stream(claim.row.message_id))
        assert [r.event for r in decoded][-len(expected):] == expected
    stored = sum(len(stored_events(engine, m)) for m in messages)
    assert stored == 5 + 2 + 2 + 5, "queued, dead claims, expiries, claims"
    assert_projections_match_log(engine)


def test_a_group_of_outcomes_is_recorded_in_one_statement_and_only_while_its_leases_hold(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    queue(ctx, 3)
    with engine.begin() as connection:
        claims = claim_due(connection, owner="w1", limit=3, now=clock.now(), policy=ctx.delivery_policy)
    clock.advance(ctx.delivery_policy.lease + timedelta(seconds=1))
    with engine.begin() as connection:  # the last one's lease ran out and was taken over
        [taken] = claim_due(connection, owner="w2", limit=1, now=clock.now(), policy=ctx.delivery_policy)
    assert taken.row.message_id == claims[0].row.message_id
    outcomes = [
        (c, [ProviderAccepted(c.row.message_id, c.lease_token, 1, clock.now(), "recording", f"p{n}", None)])
        for n, c in enumerate(claims)
    ]

    with engine.connect() as connection, connection.begin():
        ENDPOINTS.of(connection)  # which endpoints hear of outcomes: read once every few seconds, not per group
        with statements_sent(connection) as sent:
            recorded = record_outcomes(connection, outcomes, owner="w1")

    assert len(sent) == 1
    assert recorded == {c.row.message_id for c in claims[1:]}
    assert_projections_match_log(engine)


def test_a_fresh_read_of_a_group_is_two_statements(ctx: ServiceContext, engine: Engine, clock: ManualClock) -> None:
    queue(ctx, 4)
    with engine.begin() as connection:
        claims = claim_due(connection, owner="w1", limit=4, now=clock.now(), policy=ctx.delivery_policy)

    with engine.connect() as connection:
        with statements_sent(connection) as sent:
            prepared = prepare_all(ctx, claims, sender=SENDER, connection=connection)

    assert len(sent) == 2, "the group's streams in one statement, and its tenants' settings in one"
    assert [p.email.recipient for p in prepared if p.email] == [f"u{n}@example.test" for n in range(4)]


def test_two_workers_claiming_at_once_never_claim_the_same_message(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    messages = set(queue(ctx, 60))
    start = threading.Barrier(2)
    claimed: dict[str, list[UUID]] = {"w1": [], "w2": []}

    def work(owner: str) -> None:
        start.wait()
        while True:
            with engine.begin() as connection:
                batch = claim_due(connection, owner=owner, limit=3, now=clock.now(), policy=ctx.delivery_policy)
            if not batch:
                return
            claimed[owner] += [c.row.message_id for c in batch]

    threads = [threading.Thread(target=work, args=(owner,)) for owner in claimed]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert not set(claimed["w1"]) & set(claimed["w2"])
    assert sorted(claimed["w1"] + claimed["w2"]) == sorted(messages), "each message claimed exactly once"
    assert claimed["w1"] and claimed["w2"], "both workers claimed"
    assert_projections_match_log(engine)


def test_a_claim_that_finds_nothing_due_wakes_no_follower(
    ctx: ServiceContext, engine: Engine, database_url: str
) -> None:
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN authledger_events")
        with engine.begin() as connection:
            assert claim_due(connection, owner="idle", limit=10, now=ctx.clock.now(), policy=ctx.delivery_policy) == []
        assert list(listener.notifies(timeout=0.5)) == [], "an empty claim notifies nobody"

        queue(ctx, 1)
        assert len(list(listener.notifies(timeout=2.0, stop_after=1))) == 1, "a real append still does"
