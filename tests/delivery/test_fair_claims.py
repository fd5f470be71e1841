"""Claims go round-robin by tenant: one tenant's backlog does not hold back another tenant's mail."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from uuid import UUID, uuid4

from sqlalchemy import Engine, text

from domain.reset import RequestReset
from domain.tenants import tenant_of
from domain.webhooks import WebhookEvent, webhook_stream
from infra.clock import ManualClock
from infra.delivery.leases import Claim, claim_due
from infra.eventlog.email_leases import TENANT_OF_ROW
from infra.services.reset import request_reset
from infra.services.tenants import create_tenant
from infra.services.unit_of_work import ServiceContext, append_and_fold
from infra.services.webhook_routes import deliveries_for
from infra.services.webhooks import add_endpoint
from tests.support.replay import assert_projections_match_log
from tests.support.statements import statements_sent


def queue(ctx: ServiceContext, clock: ManualClock, tenant: str, count: int) -> list[UUID]:
    """``count`` reset emails of ``tenant``, each a millisecond after the one before."""
    queued = []
    for n in range(count):
        clock.advance(timedelta(milliseconds=1))
        queued.append(request_reset(ctx, RequestReset(f"user-{n}", f"u{n}@{tenant}.test", tenant=tenant)).message_id)
    return queued


def claim(ctx: ServiceContext, engine: Engine, clock: ManualClock, limit: int, owner: str = "w1") -> list[Claim]:
    with engine.begin() as connection:
        return claim_due(connection, owner=owner, limit=limit, now=clock.now(), policy=ctx.delivery_policy)


def tenants_of(claims: list[Claim]) -> list[str]:
    return [tenant_of(c.row.user_id) for c in claims]


def test_three_emails_queued_after_another_tenants_two_hundred_are_in_the_next_claim_of_ten(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    create_tenant(ctx, "acme")
    create_tenant(ctx, "shop")
    acme = queue(ctx, clock, "acme", 200)
    shop = queue(ctx, clock, "shop", 3)

    with engine.connect() as connection, connection.begin():
        with statements_sent(connection) as sent:
            claims = claim_due(connection, owner="w1", limit=10, now=clock.now(), policy=ctx.delivery_policy)

    assert len(sent) == 1, "still one set-based statement"
    turns = tenants_of(claims)
    assert [sorted(turns[n:n + 2]) for n in (0, 2, 4)] == [["acme", "shop"]] * 3, "each has a place in each turn"
    assert turns[6:] == ["acme"] * 4
    assert [c.row.message_id for c in claims if c.row.message_id in shop] == shop
    assert [c.row.message_id for c in claims if c.row.message_id not in shop] == acme[:7], "acme's oldest first"
    assert_projections_match_log(engine)


def test_claims_of_one_message_each_still_reach_a_tenant_queued_behind_another_tenants_backlog(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    create_tenant(ctx, "acme")
    create_tenant(ctx, "shop")
    queue(ctx, clock, "acme", 200)
    [shop] = queue(ctx, clock, "shop", 1)
    claimed: list[UUID] = []
    with engine.connect() as connection:
        connection.execute(text("SELECT setseed(0.36)"))  # the turn's order is random: this run's is fixed
        connection.commit()
        while shop not in claimed:
            with connection.begin():
                [one] = claim_due(connection, owner="w1", limit=1, now=clock.now(), policy=ctx.delivery_policy)
            claimed.append(one.row.message_id)

    # Oldest first, it would be the 201st claim; each claim gives each tenant an even chance.
    assert len(claimed) < 20


def test_a_share_one_tenant_cannot_fill_goes_to_the_oldest_mail_of_the_others(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    for name in ("acme", "shop", "zoo"):
        create_tenant(ctx, name)
    acme = queue(ctx, clock, "acme", 20)
    [shop] = queue(ctx, clock, "shop", 1)
    zoo = queue(ctx, clock, "zoo", 20)

    claims = claim(ctx, engine, clock, 9)  # a share of 3 each; shop has 1, so 2 more go to the oldest others

    assert Counter(tenants_of(claims)) == {"acme": 5, "shop": 1, "zoo": 3}
    assert shop in [c.row.message_id for c in claims]
    assert {c.row.message_id for c in claims} >= set(acme[:5]) | set(zoo[:3])


def test_the_default_tenant_is_a_tenant_like_any_other(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    create_tenant(ctx, "acme")
    queue(ctx, clock, "default", 50)
    queue(ctx, clock, "acme", 2)

    claims = claim(ctx, engine, clock, 4)

    assert sorted(tenants_of(claims)) == ["acme", "acme", "default", "default"]


def test_two_workers_claiming_side_by_side_share_both_tenants_and_never_a_message(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    create_tenant(ctx, "acme")
    create_tenant(ctx, "shop")
    queue(ctx, clock, "acme", 30)
    queue(ctx, clock, "shop", 30)

    with engine.connect() as first, first.begin():  # the first claim is not committed when the second runs
        one = claim_due(first, owner="w1", limit=6, now=clock.now(), policy=ctx.delivery_policy)
        two = claim(ctx, engine, clock, 6, owner="w2")

    assert Counter(tenants_of(one)) == Counter(tenants_of(two)) == {"acme": 3, "shop": 3}
    assert not {c.row.message_id for c in one} & {c.row.message_id for c in two}


def test_the_claim_finds_tenants_and_their_oldest_rows_through_the_tenant_index(engine: Engine) -> None:
    with engine.connect() as connection:
        connection.execute(text("SET enable_seqscan = off"))  # a tiny table would be read whole otherwise
        plan = connection.execute(text(  # the claim's own expression: word for word the index's
            f"EXPLAIN SELECT {TENANT_OF_ROW} FROM email_outbox WHERE state IN ('pending', 'leased') "
            "ORDER BY 1 LIMIT 1")).scalars().all()
    assert any("email_outbox_due_by_tenant" in line for line in plan), plan


def test_a_tenants_backlog_of_webhooks_shares_the_claim_with_another_tenants_email_turn_by_turn(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    create_tenant(ctx, "acme")
    create_tenant(ctx, "shop")
    add_endpoint(ctx, "acme", "https://hooks.acme.test/a")
    now = clock.now()
    facts = [WebhookEvent("otp.verified", "acme", {"tenant": "acme"}, uuid4(), now) for _ in range(50)]
    with engine.begin() as connection:
        queued = [q for fact in facts for q in deliveries_for(connection, [fact])]
        append_and_fold(connection, [(webhook_stream(q.delivery_id), 0, [q]) for q in queued])
    shop = queue(ctx, clock, "shop", 2)

    claims = claim(ctx, engine, clock, 4)

    assert sorted(tenants_of(claims)) == ["acme", "acme", "shop", "shop"]
    assert {c.row.flow for c in claims if c.row.message_id not in shop} == {"webhook"}
    assert_projections_match_log(engine)
