"""delivery_stats: counts, attempts and exact percentiles, the same from the table as from a replay."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Engine, text

from domain.log import Checkpoint
from domain.reset import RequestReset
from infra.projector.catchup import catch_up
from infra.clock import ManualClock
from infra.delivery.report import delivery_report
from infra.eventlog.reader import COMMITTED, pages
from infra.projector.registry import projection_named
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from infra.delivery.worker import Worker
from projections.delivery_stats import DeliveryRow, percentile_disc, summarise
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log
from tests.support.traffic import SENDER, some_traffic


def test_percentile_disc_picks_a_value_as_postgresql_does() -> None:
    values = [timedelta(seconds=s) for s in range(1, 21)]
    assert percentile_disc(values, 0.5) == timedelta(seconds=10)
    assert percentile_disc(values, 0.95) == timedelta(seconds=19)
    assert percentile_disc(values[:1], 0.95) == timedelta(seconds=1)
    assert percentile_disc([], 0.5) is None


def test_the_report_counts_outcomes_and_times_from_queued_to_accepted_exactly(
    ctx: ServiceContext, clock: ManualClock, engine: Engine
) -> None:
    for n in range(20):  # queued one second apart, all sent at once: 20 different waits
        request_reset(ctx, RequestReset(f"user-{n}", f"u{n}@example.test"))
        clock.advance(1)
    Worker(ctx, RecordingMailer(), sender=SENDER).drain()
    some_traffic(ctx, clock)  # retries, supersessions, skips
    catch_up(engine)

    report = delivery_report(engine, since=clock.now().date() - timedelta(days=1), until=clock.now().date())

    with engine.connect() as connection:
        states = dict(connection.execute(text("SELECT state, count(*) FROM email_outbox GROUP BY state")).all())
    by_outcome: dict[str, int] = {}
    for line in report:
        by_outcome[line.outcome] = by_outcome.get(line.outcome, 0) + line.messages
    assert by_outcome == states, "one message per outbox row, each counted under its outcome"
    assert sum(line.attempts for line in report) >= sum(states.values()) - states.get("skipped", 0)
    waits = [line for line in report if line.outcome == "sent" and line.max == timedelta(seconds=20)]
    assert len(waits) == 1 and waits[0].p50 is not None and waits[0].p50 <= waits[0].p95 <= waits[0].max
    assert all(line.p50 is None for line in report if line.outcome != "sent")
    assert_projections_match_log(engine)


def test_the_sql_report_equals_summarise_over_a_replay(ctx: ServiceContext, clock: ManualClock,
                                                       engine: Engine) -> None:
    for n in range(20):
        request_reset(ctx, RequestReset(f"user-{n}", f"u{n}@example.test"))
        clock.advance(1 + n % 3)
    Worker(ctx, RecordingMailer(), sender=SENDER).drain()
    some_traffic(ctx, clock)
    catch_up(engine)
    with engine.connect() as connection:
        log = [r for page in pages(connection, Checkpoint(), COMMITTED) for r in page]
    rows = [DeliveryRow(**row) for row in projection_named("delivery_stats").applier.fold(log)["delivery_messages"]]

    assert delivery_report(engine, since=clock.now().date() - timedelta(days=2), until=clock.now().date()) \
        == summarise(rows)
