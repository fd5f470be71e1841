"""Personal fields are sealed per user on encode, opened on decode, and read [erased] once the key is gone."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from uuid import uuid4

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.email import EmailQueued
from infra.errors import PersonalDataUnreadable
from domain.reset import RequestReset
from domain.reset_events import ResetRequested, reset_stream
from infra.eventlog.tags import EVENT_TYPES, PERSONAL_FIELDS
from infra.eventlog.personal_data import (
    ERASED, FieldContext, MemoryKeyring, is_envelope, key_id_of, open_envelope, seal,
)
from infra.eventlog.postgres import PostgresEventStore
from infra.services.reset import request_reset
from infra.eventlog.codec import default_codec
from infra.services.unit_of_work import ServiceContext

NOW = datetime(2026, 1, 1, tzinfo=UTC)
# Field names that would hold personal data if an event ever carried them.
PERSONAL_LOOKING = ("recipient", "email", "address", "client_ip", "ip", "ip_address", "phone")


def queued(user_id: str, recipient: str) -> EmailQueued:
    return EmailQueued(message_id=uuid4(), flow="reset", template="reset_link", user_id=user_id,
                       request_id=uuid4(), recipient=recipient, available_at=NOW)


def requested(user_id: str, recipient: str) -> ResetRequested:
    return ResetRequested(request_id=uuid4(), user_id=user_id, recipient=recipient, key_id="k1",
                          token_hash="0" * 64, requested_at=NOW, expires_at=NOW, message_id=uuid4(),
                          idempotency_key=None, client=None)


def test_a_personal_field_is_stored_as_an_envelope_and_read_back() -> None:
    codec, keyring = default_codec(), MemoryKeyring()
    event = queued("42", "ada@example.test")
    _, _, payload_json = codec.encode_json(event, keyring)
    payload = json.loads(payload_json)
    assert "ada@example.test" not in payload_json
    assert is_envelope(payload["recipient"]) and payload["recipient"].startswith("enc:v1:")
    assert payload["user_id"] == "42" and payload["flow"] == "reset", "the rest stays readable"
    assert codec.decode("EmailQueued", 1, payload, keyring) == event


def test_one_user_has_one_key_and_every_envelope_is_fresh() -> None:
    codec, keyring = default_codec(), MemoryKeyring()
    first = codec.encode(queued("42", "ada@example.test"), keyring)[2]["recipient"]
    second = codec.encode(queued("42", "ada@example.test"), keyring)[2]["recipient"]
    other = codec.encode(queued("7", "ada@example.test"), keyring)[2]["recipient"]
    assert key_id_of(first) == key_id_of(second) != key_id_of(other)
    assert first != second, "a random nonce each time: equal addresses do not show as equal ciphertexts"


def test_after_the_key_is_destroyed_the_field_reads_erased_and_the_rest_is_intact() -> None:
    codec, keyring = default_codec(), MemoryKeyring()
    event = queued("42", "ada@example.test")
    payload = codec.encode(event, keyring)[2]
    assert keyring.forget("42")
    assert codec.decode("EmailQueued", 1, payload, keyring) == attrs.evolve(event, recipient=ERASED)


def test_a_ciphertext_moved_into_another_users_event_does_not_decrypt() -> None:
    codec, keyring = default_codec(), MemoryKeyring()
    ada = codec.encode(queued("42", "ada@example.test"), keyring)[2]
    bob = codec.encode(queued("7", "bob@example.test"), keyring)[2]
    forged = {**bob, "recipient": ada["recipient"]}
    with pytest.raises(PersonalDataUnreadable, match="EmailQueued.recipient of user '7' does not decrypt"):
        codec.decode("EmailQueued", 1, forged, keyring)


def test_a_ciphertext_moved_into_another_event_type_of_the_same_user_does_not_decrypt() -> None:
    codec, keyring = default_codec(), MemoryKeyring()
    email = codec.encode(queued("42", "ada@example.test"), keyring)[2]
    request = codec.encode(requested("42", "eve@example.test"), keyring)[2]
    with pytest.raises(PersonalDataUnreadable, match="altered, or copied"):
        codec.decode("ResetRequested", 1, {**request, "recipient": email["recipient"]}, keyring)


def test_a_changed_byte_in_an_envelope_does_not_decrypt() -> None:
    context, key = FieldContext("42", "EmailQueued", "recipient"), bytes(32)
    envelope = seal("k", key, context, "ada@example.test")
    assert open_envelope(envelope, key, context) == "ada@example.test"
    flipped = envelope[:-3] + ("A" if envelope[-3] != "A" else "B") + envelope[-2:]
    with pytest.raises(PersonalDataUnreadable):
        open_envelope(flipped, key, context)
    with pytest.raises(PersonalDataUnreadable, match="malformed envelope"):
        key_id_of("enc:v1:no-data")


def test_personal_data_is_never_encoded_in_clear_for_want_of_a_keyring() -> None:
    codec = default_codec()
    with pytest.raises(PersonalDataUnreadable, match="needs a keyring"):
        codec.encode(queued("42", "ada@example.test"))
    payload = codec.encode(queued("42", "ada@example.test"), MemoryKeyring())[2]
    with pytest.raises(PersonalDataUnreadable, match="needs a keyring"):
        codec.decode("EmailQueued", 1, payload)


@pytest.mark.parametrize("tag", sorted(PERSONAL_FIELDS))
def test_every_declared_personal_field_exists_beside_the_user_it_belongs_to(tag: str) -> None:
    names = {f.name for f in attrs.fields(EVENT_TYPES[tag][0])}
    assert "user_id" in names
    assert set(PERSONAL_FIELDS[tag]) <= names


@pytest.mark.parametrize("tag", sorted(EVENT_TYPES))
def test_no_event_carries_an_undeclared_field_that_looks_personal(tag: str) -> None:
    names = {f.name for f in attrs.fields(EVENT_TYPES[tag][0])}
    assert names & set(PERSONAL_LOOKING) <= set(PERSONAL_FIELDS.get(tag, ())), (
        f"{tag} has a personal-looking field: declare it in infra.eventlog.tags.PERSONAL_FIELDS"
    )


@pytest.mark.parametrize("text", ["enc:v1:", "enc:v1:abc:def", "enc:v1:k:AAAA"])
def test_text_a_client_chose_that_looks_like_an_envelope_is_read_back_as_written(text: str) -> None:
    codec, keyring = default_codec(), MemoryKeyring()
    event = attrs.evolve(requested(text, "ada@example.test"), idempotency_key=text, client=text)
    _, _, payload_json = codec.encode_json(event, keyring)

    assert codec.decode("ResetRequested", EVENT_TYPES["ResetRequested"][1], json.loads(payload_json), keyring) == event


def test_a_stream_whose_user_id_looks_like_an_envelope_stays_readable(ctx: ServiceContext) -> None:
    tricky = "enc:v1:abc:def"
    outcome = request_reset(ctx, RequestReset(tricky, "ada@example.test", idempotency_key=tricky))

    with ctx.engine.connect() as connection:
        [recorded] = PostgresEventStore(connection).load(reset_stream(tricky))
    assert recorded.event.user_id == recorded.event.idempotency_key == tricky
    assert recorded.event.request_id == outcome.request_id and recorded.event.recipient == "ada@example.test"


@given(st.text(), st.text(), st.text())
def test_the_associated_data_is_the_json_array_every_envelope_was_sealed_with(
    user_id: str, tag: str, field: str
) -> None:
    # Envelopes already in logs were sealed with json.dumps' bytes: the faster spelling must match them exactly.
    expected = json.dumps(["authledger-personal-v1", user_id, tag, field], separators=(",", ":")).encode("utf-8")
    assert FieldContext(user_id, tag, field).associated_data() == expected
