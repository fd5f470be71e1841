"""Workers SIGKILLed at random while they deliver: no message lost, duplicates only where physics allows.

Quick form of bench/chaos.py: 4 real worker processes, each with a window of
sends in flight, one killed and restarted every few hundred milliseconds.
"""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from tests.support.chaos import run_chaos
from tests.support.replay import assert_projections_match_log

pytestmark = pytest.mark.slow

SMTP_WINDOW = 4


def test_with_an_idempotent_provider_every_message_is_sent_exactly_once(engine: Engine, database_url: str) -> None:
    report = run_chaos(engine, database_url, provider="http", messages=200, kill_for_seconds=4.0)
    print(report)
    assert report.kills >= 5
    assert report.lost == 0
    assert report.duplicates == 0
    assert report.accepted_sends == 200
    assert_projections_match_log(engine)


def test_with_a_plain_smtp_sink_duplicates_only_come_from_workers_killed_mid_send(
    engine: Engine, database_url: str
) -> None:
    report = run_chaos(engine, database_url, provider="smtp", messages=200, kill_for_seconds=4.0, seed=2,
                       inflight=SMTP_WINDOW)
    print(report)
    assert report.lost == 0
    # A duplicate needs a worker killed after the relay accepted the mail and
    # before the outcome was recorded. Without idempotency a send holds its
    # place in the window until its outcome is recorded, so each kill can
    # repeat at most a window's worth.
    assert report.duplicates <= report.kills * SMTP_WINDOW
    assert report.duplicates_explained, "every duplicate follows a lease that expired after a kill"
    assert 200 <= report.accepted_sends <= 200 + report.kills * SMTP_WINDOW
    assert_projections_match_log(engine)
