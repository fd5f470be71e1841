"""The outbox page's data: 24 h of counts by hour and state, the lists that need an operator, and the SVG chart."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

import attrs
from sqlalchemy import text

from domain.delivery import DeliveryPolicy
from domain.reset import RequestReset
from infra.clock import ManualClock
from infra.delivery.overview import QUERIES, attention_lists, hourly_counts, last_24_hours
from infra.delivery.status import GIVEN_UP
from infra.delivery.worker import Worker
from infra.projector.catchup import catch_up
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from projections.outbox_chart import HourCounts, render_outbox_chart
from tests.support.mailers import RecordingMailer, RefusingMailer
from tests.support.replay import assert_projections_match_log

SENDER = "authledger <no-reply@app.test>"
SVG = "{http://www.w3.org/2000/svg}"
START = datetime(2026, 3, 1, 8, 10, tzinfo=UTC)


def request(ctx: ServiceContext, user_id: str) -> None:
    request_reset(ctx, RequestReset(user_id, f"user{user_id}@example.test"))


def deliver(ctx: ServiceContext, mailer: RecordingMailer | None = None, failures: int = 0) -> dict[str, int]:
    mailer = mailer or RecordingMailer()
    mailer.fail_next = failures
    return Worker(ctx, mailer, sender=SENDER).drain()


def a_day_of_mail(ctx: ServiceContext, clock: ManualClock) -> None:
    """Yesterday one sent message (outside the window); today two sent at 08:xx, one failed at 09:xx,
    one abandoned and one waiting for a retry at 10:xx."""
    clock.advance(START - timedelta(hours=30) - clock.now())
    request(ctx, "old")
    deliver(ctx)
    clock.advance(START - clock.now())
    request(ctx, "1")
    request(ctx, "2")
    assert deliver(ctx) == {"sent": 2}
    clock.advance(3600)
    request(ctx, "3")
    assert deliver(ctx, RefusingMailer()) == {"failed": 1}
    clock.advance(3600)
    capped = attrs.evolve(ctx, delivery_policy=DeliveryPolicy(max_attempts=1))
    request(capped, "4")
    assert deliver(capped, failures=1) == {"abandoned": 1}
    request(ctx, "5")
    assert deliver(ctx, failures=1) == {"pending": 1}


def test_the_last_24_hours_are_whole_hours_ending_with_the_current_one() -> None:
    since, until = last_24_hours(datetime(2026, 3, 1, 10, 25, 3, tzinfo=UTC))
    assert (since, until) == (datetime(2026, 2, 28, 11, tzinfo=UTC), datetime(2026, 3, 1, 11, tzinfo=UTC))


def test_counts_are_bucketed_by_the_hour_queued_and_the_hour_finished(ctx: ServiceContext, clock: ManualClock) -> None:
    a_day_of_mail(ctx, clock)
    catch_up(ctx.engine)
    hours = hourly_counts(ctx.engine, now=clock.now())
    assert len(hours) == 24 and hours[-1].start == datetime(2026, 3, 1, 10, tzinfo=UTC)
    by_hour = {h.start.hour: dict(h.counts) for h in hours}
    assert by_hour[8] == {"queued": 2, "sent": 2, "skipped": 0, "failed": 0, "abandoned": 0}
    assert by_hour[9] == {"queued": 1, "sent": 0, "skipped": 0, "failed": 1, "abandoned": 0}
    assert by_hour[10] == {"queued": 2, "sent": 0, "skipped": 0, "failed": 0, "abandoned": 1}
    assert sum(h.counts["sent"] for h in hours) == 2, "yesterday's mail is outside the window"
    assert_projections_match_log(ctx.engine)


def test_the_lists_name_retrying_failed_and_abandoned_mail_with_the_last_error(
    ctx: ServiceContext, clock: ManualClock
) -> None:
    a_day_of_mail(ctx, clock)
    lists = attention_lists(ctx.engine, now=clock.now())
    assert [len(lists[k]) for k in ("retrying", "stuck", "failed", "abandoned")] == [1, 0, 1, 1]
    assert lists["failed"][0]["last_error"] == "550 no such user"
    assert "provider busy" in lists["abandoned"][0]["last_error"]
    assert lists["retrying"][0]["next_attempt_at"] > clock.now().isoformat()


def test_a_lease_that_ran_out_is_listed_as_stuck(ctx: ServiceContext, clock: ManualClock) -> None:
    from infra.delivery.leases import claim_due

    request(ctx, "1")
    with ctx.engine.begin() as connection:
        claim_due(connection, owner="w-killed", limit=1, now=clock.now(), policy=ctx.delivery_policy)
    clock.advance(600)
    stuck = attention_lists(ctx.engine, now=clock.now())["stuck"]
    assert [m["kind"] for m in stuck] == ["expired_lease"] and stuck[0]["lease_owner"] == "w-killed"


def test_the_chart_queries_use_their_indexes(ctx: ServiceContext, clock: ManualClock) -> None:
    since, until = last_24_hours(clock.now())
    with ctx.engine.connect() as connection:
        connection.execute(text("SET LOCAL enable_seqscan = off"))
        for name, query in QUERIES.items():
            plan = "\n".join(connection.execute(text("EXPLAIN " + query.text),
                                                {"origin": since, "since": since, "until": until}).scalars())
            assert "delivery_messages_by_" in plan, f"{name} does not use its index:\n{plan}"
        plan = "\n".join(connection.execute(text("EXPLAIN " + GIVEN_UP.text), {"limit": 100}).scalars())
        assert "email_outbox_given_up" in plan, plan


def chart(hours: list[HourCounts]) -> ET.Element:
    return ET.fromstring(render_outbox_chart(hours))


def test_the_chart_is_an_accessible_svg_with_a_bar_per_hour_and_state() -> None:
    hours = [HourCounts(START.replace(minute=0) + timedelta(hours=h),
                        {"queued": h, "sent": h, "skipped": 0, "failed": 1 if h == 5 else 0, "abandoned": 0})
             for h in range(24)]
    svg = chart(hours)
    assert svg.get("role") == "img"
    assert "last 24 hours" in svg.find(f"{SVG}title").text
    assert "276 queued" in svg.find(f"{SVG}desc").text and "1 failed" in svg.find(f"{SVG}desc").text
    labels = {t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "axis-label"}
    assert labels == {"Messages", "Hour (UTC)"}
    bars = [r for r in svg.iter(f"{SVG}rect") if "bar" in (r.get("class") or "")]
    assert len(bars) == 24 * 4
    failed = [b for b in bars if b.get("data-state") == "failed" and b.get("data-count") != "0"]
    assert [(b.get("data-hour"), b.get("data-count")) for b in failed] == [("2026-03-01T13:00Z", "1")]
    points = [c for c in svg.iter(f"{SVG}circle") if c.get("data-state") == "queued"]
    assert [p.get("data-count") for p in points] == [str(h) for h in range(24)]
    assert all(b.find(f"{SVG}title") is not None for b in bars), "each bar says what it is"
    assert "style=" not in render_outbox_chart(hours), "no inline style for a strict CSP to block"


def test_an_empty_day_draws_an_empty_chart_not_a_division_by_zero() -> None:
    hours = [HourCounts(START + timedelta(hours=h), {}) for h in range(24)]
    svg = chart(hours)
    assert {b.get("data-count") for b in svg.iter(f"{SVG}rect") if b.get("data-state")} == {"0"}
    assert "0 queued" in svg.find(f"{SVG}desc").text
