"""A message given back unsent while its provider was down does not count the attempt; old logs replay as before."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

from domain.email import EmailQueued, LeaseClaimed, LeaseReleased
from infra.eventlog.codec import default_codec
from projections.outbox import fold_outbox

AT = datetime(2026, 1, 1, tzinfo=UTC)
MESSAGE, TOKEN = UUID(int=1), UUID(int=2)


def claimed_then(released: LeaseReleased) -> list[object]:
    return [
        EmailQueued(MESSAGE, "reset", "reset_link", "42", UUID(int=3), "a@example.test", AT),
        LeaseClaimed(MESSAGE, "w1", TOKEN, AT, AT + timedelta(seconds=45), 1),
        released,
    ]


def test_a_release_that_returns_the_attempt_takes_it_off_the_count() -> None:
    row = fold_outbox(claimed_then(LeaseReleased(MESSAGE, "w1", TOKEN, AT, attempt_returned=True)))
    assert row is not None and (row.state, row.attempt_count, row.lease_token) == ("pending", 0, None)


def test_a_release_on_shutdown_keeps_the_count_as_it_always_did() -> None:
    row = fold_outbox(claimed_then(LeaseReleased(MESSAGE, "w1", TOKEN, AT)))
    assert row is not None and (row.state, row.attempt_count) == ("pending", 1)


def test_a_release_recorded_before_the_field_existed_reads_as_keeping_the_attempt() -> None:
    stored = {"message_id": str(MESSAGE), "lease_owner": "w1", "lease_token": str(TOKEN),
              "released_at": AT.isoformat()}

    assert default_codec().decode("LeaseReleased", 1, stored) == LeaseReleased(MESSAGE, "w1", TOKEN, AT, False)
