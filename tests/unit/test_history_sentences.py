"""The words `history` and `explain` use for each event: every event type has some.

A sentence names no person. The timeline's one-line summaries name the
address an email went to, as the reader opened it: plain text for a
reviewer, or [erased] after the user was forgotten.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.email import DeliverySkipped, EmailQueued
from domain.log import RecordedEvent
from domain.privacy import SubjectErased, subject_stream
from domain.reset_events import ResetRequested
from infra.eventlog.personal_data import ERASED
from infra.eventlog.tags import EVENT_TYPES, PERSONAL_FIELDS
from projections.explain import explain_user, user_findings
from projections.timeline import summary, timeline

ADDRESS = "ada.lovelace@example.test"
AT = datetime(2024, 5, 1, 10, 0, 0, tzinfo=UTC)
CLI = {"actor": "cli:alice", "client": "cli", "command": "privacy forget"}
REQUEST, MESSAGE = UUID(int=0xA00), UUID(int=0xA01)

st.register_type_strategy(datetime, st.datetimes(timezones=st.just(UTC)))  # as the service records them


@pytest.mark.parametrize("tag", sorted(EVENT_TYPES))
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_every_registered_event_type_has_a_summary_that_names_no_one_but_its_recipient(
    tag: str, data: st.DataObject
) -> None:
    cls, _ = EVENT_TYPES[tag]
    attrs.resolve_types(cls)  # string annotations -> real types, for hypothesis
    personal = {name: st.just(ADDRESS) for name in PERSONAL_FIELDS.get(tag, ())}
    event = data.draw(st.builds(cls, **personal))
    said = summary(event)
    assert said and said != type(event).__name__, f"{tag} has no sentence in projections/timeline.py summary()"
    if PERSONAL_FIELDS.get(tag):
        assert ADDRESS in said, "a reviewer reads where the email went"
    else:
        assert ADDRESS not in said


def recorded(position: int, stream_id: str, event: object, metadata: dict[str, str] | None = None) -> RecordedEvent:
    return RecordedEvent(position, stream_id, 1, UUID(int=position), type(event).__name__, 1, event,
                         metadata if metadata is not None else {}, AT, transaction_id=1000 + position)


def forgotten_user() -> list[RecordedEvent]:
    """User 1 asks for a reset link; they are forgotten before a worker sends it, so it is skipped.

    As a review reads the log after the erasure: the addresses read [erased].
    """
    web = {"actor": "client:acme-web", "client": "acme-web"}
    erased_at = AT + timedelta(minutes=5)
    return [
        recorded(1, "reset-user:1", ResetRequested(REQUEST, "1", ERASED, "k2", "hash", AT, AT + timedelta(minutes=30),
                                                   MESSAGE, None, "acme-web"), web),
        recorded(2, f"email:{MESSAGE}", EmailQueued(MESSAGE, "reset", "reset_link", "1", REQUEST, ERASED, AT), web),
        recorded(3, subject_stream("1"), SubjectErased("1", erased_at, ("3f9c0a",)), CLI),
        recorded(4, f"email:{MESSAGE}", DeliverySkipped(MESSAGE, erased_at + timedelta(seconds=1), "erased"),
                 {"actor": "w1"}),
    ]


def test_an_erasure_is_told_with_whom_it_erased_when_by_whom_and_which_keys_but_no_address() -> None:
    findings = explain_user(forgotten_user(), "1", now=AT + timedelta(hours=1))
    assert findings[0] == (
        "User 1's personal data was erased at 2024-05-01 10:05:00.000+00:00 by cli:alice: data key 3f9c0a destroyed. "
        "From then on their email addresses in the log read [erased] wherever they are opened, and an email still "
        "queued for them is skipped, not sent; ids, times and who did what stay in the log."
    )
    assert (f"Reset request {REQUEST}'s email {MESSAGE} was skipped (erased) by worker w1 at "
            "2024-05-01 10:05:01.000+00:00: it was not sent, because its recipient's personal data had been erased."
            ) in findings
    entry = next(e for e in timeline(forgotten_user()) if e.event_type == "SubjectErased")
    assert (entry.at, entry.actor, entry.summary) == (
        AT + timedelta(minutes=5), "cli:alice", "personal data erased: data key 3f9c0a destroyed"
    )
    assert [e.summary for e in timeline(forgotten_user())][:2] == [
        f"reset link requested for [erased], valid until 2024-05-01 10:30:00.000+00:00, email {MESSAGE}",
        "email queued (reset_link) to [erased]",
    ]


def test_an_erasure_with_no_key_left_and_no_recorded_actor_says_both() -> None:
    erased = recorded(7, subject_stream("9"), SubjectErased("9", AT, ()))
    assert explain_user([erased], "9", now=AT) == [(
        "User 9's personal data was erased at 2024-05-01 10:00:00.000+00:00 by an unrecorded caller: "
        "no data key was left to destroy."
    )]
    assert summary(erased.event) == "personal data erased: no data key was left to destroy"


def test_each_finding_carries_its_kind_time_and_ids_beside_the_sentence() -> None:
    erasure = user_findings(forgotten_user(), "1", now=AT + timedelta(hours=1))[0]
    assert erasure.as_dict() == {
        "kind": "SubjectErased", "sentence": erasure.sentence, "position": 3, "at": "2024-05-01T10:05:00+00:00",
        "user_id": "1",
    }
    told = {f.kind: f.as_dict() for f in user_findings(forgotten_user(), "1", now=AT + timedelta(hours=1))}
    skipped = told["DeliverySkipped"]
    assert skipped["message_id"] == str(MESSAGE) and skipped["request_id"] == str(REQUEST)
    assert skipped["at"] == "2024-05-01T10:05:01+00:00" and skipped["position"] == 4
    assert told["ResetRequested"]["user_id"] == "1" and "expires_at" in told["ResetRequested"]
