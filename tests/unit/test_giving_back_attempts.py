"""Mail and provider outages: an attempt given back unsent does not count; old logs replay as before;
reviewers read of an outage in the story of the mail that waited through it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

from domain.email import EmailQueued, LeaseClaimed, LeaseReleased, ProviderAccepted
from domain.log import RecordedEvent
from domain.outage import ProviderOutageBegan, ProviderOutageEnded
from domain.reset_events import ResetRequested
from infra.eventlog.codec import default_codec
from projections.explain import explain_request
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


def test_an_outage_while_an_email_waited_is_told_in_its_story() -> None:
    began = ProviderOutageBegan("http", "w1", AT + timedelta(seconds=1), 5, "http 503")
    ended = ProviderOutageEnded("http", "w1", AT + timedelta(seconds=20), AT + timedelta(seconds=1))
    request = ResetRequested(UUID(int=3), "42", "a@example.test", "k2", "hash", AT, AT + timedelta(minutes=30),
                             MESSAGE, None, None)
    log = [("reset-user:42", request), (f"email:{MESSAGE}", claimed_then(LeaseReleased(MESSAGE, "w1", TOKEN, AT))[0]),
           ("provider:http", began), ("provider:http", ended),
           (f"email:{MESSAGE}", ProviderAccepted(MESSAGE, TOKEN, 1, AT + timedelta(seconds=21), "http", "p1", "k2"))]
    recorded = [RecordedEvent(n, stream, 1, UUID(int=100 + n), type(e).__name__, 1, e, {}, AT, transaction_id=n)
                for n, (stream, e) in enumerate(log, start=1)]

    story = explain_request(recorded, UUID(int=3), now=AT + timedelta(minutes=1))

    assert any(line.startswith("Provider http was recognised as down by worker w1") for line in story)
    assert any(line.startswith("Provider http answered worker w1 again") for line in story)
