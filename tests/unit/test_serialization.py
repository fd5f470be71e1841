"""Every event class round-trips through the one converter; old payloads are upcast."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from uuid import UUID

import attrs
import pytest
from attrs import frozen
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.errors import UnknownEventType
from domain.email import ProviderAccepted
from domain.otp_events import OtpChallengeIssued
from domain.reset_events import ResetRequested
from infra.eventlog.tags import EVENT_TYPES
from infra.eventlog.personal_data import MemoryKeyring, is_envelope
from infra.eventlog.codec import EventCodec, default_codec
from tests.support.secrets import nonce

aware_datetimes = st.datetimes(timezones=st.just(UTC))
st.register_type_strategy(datetime, aware_datetimes)


@pytest.mark.parametrize("tag", sorted(EVENT_TYPES))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_event_class_round_trips_through_json(tag: str, data: st.DataObject) -> None:
    cls, version = EVENT_TYPES[tag]
    attrs.resolve_types(cls)  # string annotations -> real types, for hypothesis
    event = data.draw(st.builds(cls))
    codec, keyring = default_codec(), MemoryKeyring()
    encoded_tag, encoded_version, payload_json = codec.encode_json(event, keyring)
    assert (encoded_tag, encoded_version) == (tag, version)
    assert codec.decode(tag, version, json.loads(payload_json), keyring) == event


def test_tags_are_names_not_module_paths() -> None:
    assert all("." not in tag for tag in EVENT_TYPES)


@frozen
class Renamed:
    user_id: str
    recipient: str


def test_an_old_payload_is_read_as_the_current_class() -> None:
    def v1_to_v2(payload: dict) -> dict:
        payload = dict(payload)
        payload["recipient"] = payload.pop("email")
        return payload

    codec = EventCodec({"Renamed": (Renamed, 2)}, {("Renamed", 1): v1_to_v2})
    assert codec.decode("Renamed", 1, {"user_id": "42", "email": "a@example.test"}) == Renamed("42", "a@example.test")


def test_an_unknown_tag_is_a_clear_error() -> None:
    with pytest.raises(UnknownEventType, match="unknown type 'Nope'"):
        default_codec().decode("Nope", 1, {})


def test_a_payload_from_a_newer_version_is_refused() -> None:
    codec = EventCodec({"Renamed": (Renamed, 1)})
    with pytest.raises(UnknownEventType, match="newer"):
        codec.decode("Renamed", 2, {"user_id": "1", "recipient": "x"})


def test_uuids_and_datetimes_are_stored_as_strings() -> None:
    @frozen
    class Stamp:
        id: UUID
        at: datetime

    codec = EventCodec({"Stamp": (Stamp, 1)})
    _, _, payload = codec.encode(Stamp(UUID(int=1), datetime(2026, 1, 1, tzinfo=UTC)))
    assert payload == {"id": "00000000-0000-0000-0000-000000000001", "at": "2026-01-01T00:00:00+00:00"}


def test_an_otp_challenge_written_before_it_recorded_its_digits_is_read_as_six_digits() -> None:
    version_1 = {
        "challenge_id": "00000000-0000-0000-0000-000000000001", "user_id": "42", "recipient": "a@example.test",
        "key_id": "k1", "purpose": "login", "issued_at": "2026-01-01T00:00:00+00:00",
        "expires_at": "2026-01-01T00:10:00+00:00", "message_id": "00000000-0000-0000-0000-000000000002",
        "idempotency_key": None, "client": None,
    }  # fmt: skip

    event = default_codec().decode("OtpChallengeIssued", 1, version_1)

    assert event == OtpChallengeIssued(
        UUID(int=1), "42", "a@example.test", "k1", 6, "login", datetime(2026, 1, 1, tzinfo=UTC),
        datetime(2026, 1, 1, 0, 10, tzinfo=UTC), UUID(int=2), None, None,
    )  # fmt: skip


def test_an_otp_challenge_is_written_with_its_digits_derivation_and_sealed_nonce_at_version_3() -> None:
    event = OtpChallengeIssued(
        UUID(int=1), "42", "a@example.test", "k1", 8, "login", datetime(2026, 1, 1, tzinfo=UTC),
        datetime(2026, 1, 1, 0, 10, tzinfo=UTC), UUID(int=2), None, None, derivation=2, nonce=nonce(7),
    )  # fmt: skip
    keyring = MemoryKeyring()
    tag, version, payload = default_codec().encode(event, keyring)
    assert (tag, version, payload["digits"], payload["derivation"]) == ("OtpChallengeIssued", 3, 8, 2)
    assert is_envelope(payload["nonce"]) and nonce(7) not in json.dumps(payload)
    assert default_codec().decode(tag, version, payload, keyring) == event


@pytest.mark.parametrize("tag", ["ResetRequested", "OtpChallengeIssued"])
def test_a_request_written_before_nonces_is_read_as_derivation_1_without_a_nonce(tag: str) -> None:
    made_before = {
        "user_id": "42", "recipient": "a@example.test", "key_id": "k1", "expires_at": "2026-01-01T00:10:00+00:00",
        "message_id": "00000000-0000-0000-0000-000000000002", "idempotency_key": None, "client": None,
    }  # fmt: skip
    if tag == "ResetRequested":
        made_before |= {"request_id": str(UUID(int=1)), "token_hash": "0" * 64,
                        "requested_at": "2026-01-01T00:00:00+00:00"}
    else:
        made_before |= {"challenge_id": str(UUID(int=1)), "purpose": "login", "digits": 6,
                        "issued_at": "2026-01-01T00:00:00+00:00"}
    version = {"ResetRequested": 1, "OtpChallengeIssued": 2}[tag]

    event = default_codec().decode(tag, version, made_before)

    assert (event.derivation, event.nonce) == (1, None)



def test_events_written_before_languages_are_read_without_one() -> None:
    when, ids = datetime(2026, 1, 1, tzinfo=UTC), UUID(int=1)
    in_german = [
        ResetRequested(ids, "42", "a@example.test", "k1", "0" * 64, when, when, ids, None, None, locale="de"),
        OtpChallengeIssued(ids, "42", "a@example.test", "k1", 6, "login", when, when, ids, None, None, locale="de"),
        ProviderAccepted(ids, ids, 1, when, "smtp", "<m@relay>", "k1", locale="de"),
    ]
    keyring = MemoryKeyring()
    for event in in_german:
        tag, version, payload = default_codec().encode(event, keyring)
        assert payload.pop("locale") == "de"

        assert default_codec().decode(tag, version, payload, keyring) == attrs.evolve(event, locale=None)
