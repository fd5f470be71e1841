"""Personal data in events, encrypted per user so that destroying a key erases it (crypto-shredding).

A personal field (``infra.eventlog.tags.PERSONAL_FIELDS``) is stored in the
event's payload as an envelope::

    enc:v1:<key_id>:<base64url(nonce || ciphertext || tag)>

AES-256-GCM under the data key of the event's user; ``key_id`` names that key
in ``subject_keys``. The associated data binds the user, the event tag and
the field name, so a ciphertext copied into another user's event, another
event type or another field does not decrypt. When the key is gone
(``authledger privacy forget``) the field reads as ``ERASED``; the log itself
never changes, and the hash chain, which covers the ciphertext, still holds.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Iterable, Mapping
from json.encoder import encode_basestring_ascii as _quoted  # what json.dumps quotes strings with
from typing import Any, Protocol, TypeGuard

from attrs import frozen
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from infra.errors import PersonalDataUnreadable

ERASED = "[erased]"
PREFIX = "enc:v1:"
# The key id of an envelope as a POSIX regular expression, for SQL that joins a field to its key (key_id_of).
KEY_ID_PATTERN = f"^{re.escape(PREFIX)}([^:]+):"
NONCE_BYTES = 12
KEY_BYTES = 32


@frozen
class FieldContext:
    """Where an encrypted value belongs: whose it is, in which event type and field."""

    user_id: str
    tag: str
    field: str

    def associated_data(self) -> bytes:
        # json.dumps(["authledger-personal-v1", user_id, tag, field], separators=(",", ":")), byte for byte,
        # from the C string encoder json.dumps itself uses: a decision opens two fields per request it
        # keeps, and building an encoder for each was a third of the cost of opening one.
        quoted = ",".join(_quoted(part) for part in (self.user_id, self.tag, self.field))
        return f'["authledger-personal-v1",{quoted}]'.encode()

    def describe(self) -> str:
        return f"{self.tag}.{self.field} of user {self.user_id!r}"


def is_envelope(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and value.startswith(PREFIX)


def key_id_of(envelope: str) -> str:
    """The data key an envelope was sealed under."""
    key_id, sep, _ = envelope[len(PREFIX):].partition(":")
    if not sep or not key_id:
        raise PersonalDataUnreadable(f"malformed envelope {envelope[:24]!r}...: expected enc:v1:<key_id>:<data>")
    return key_id


def envelope_key_ids(
    rows: Iterable[tuple[str, Mapping[str, Any]]], personal_fields: Mapping[str, tuple[str, ...]]
) -> set[str]:
    """Every data key named by the personal fields of these (event type, payload) rows.

    Only the personal fields are looked at: any other field may hold text a
    client chose, which can start with the envelope prefix too.
    """
    return {
        key_id_of(payload[name])
        for tag, payload in rows
        for name in personal_fields.get(tag, ())
        if is_envelope(payload.get(name))
    }


def seal(key_id: str, key: bytes, context: FieldContext, plaintext: str) -> str:
    nonce = os.urandom(NONCE_BYTES)
    sealed = AESGCM(key).encrypt(nonce, plaintext.encode("utf-8"), context.associated_data())
    return f"{PREFIX}{key_id}:{base64.urlsafe_b64encode(nonce + sealed).decode('ascii').rstrip('=')}"


def open_envelope(envelope: str, key: bytes, context: FieldContext) -> str:
    """The plaintext; ``PersonalDataUnreadable`` when the envelope was altered or moved."""
    data = envelope[len(PREFIX):].partition(":")[2]
    try:
        blob = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
        plaintext = AESGCM(key).decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], context.associated_data())
        return plaintext.decode("utf-8")
    except (binascii.Error, ValueError, InvalidTag):
        raise PersonalDataUnreadable(
            f"{context.describe()} does not decrypt under its key {key_id_of(envelope)!r}: the envelope was "
            "altered, or copied from another event, field or user"
        ) from None


class Keyring(Protocol):
    """Seals and opens personal fields with the data keys of users."""

    def seal(self, context: FieldContext, plaintext: str) -> str:
        """The envelope of ``plaintext`` under the user's data key, created if the user has none."""
        ...

    def open(self, context: FieldContext, envelope: str) -> str:
        """The plaintext, or ``ERASED`` when the key the envelope names was destroyed."""
        ...


class DataKeyring:
    """``Keyring`` over two look-ups that subclasses provide: the key to write with, a key by id."""

    def writing_key(self, user_id: str) -> tuple[str, bytes]:
        raise NotImplementedError

    def reading_key(self, key_id: str) -> bytes | None:
        """The data key named ``key_id``, or None when it was destroyed."""
        raise NotImplementedError

    def seal(self, context: FieldContext, plaintext: str) -> str:
        key_id, key = self.writing_key(context.user_id)
        return seal(key_id, key, context, plaintext)

    def open(self, context: FieldContext, envelope: str) -> str:
        key = self.reading_key(key_id_of(envelope))
        return ERASED if key is None else open_envelope(envelope, key, context)


class MemoryKeyring(DataKeyring):
    """Data keys in a dict: for the in-memory store and tests."""

    def __init__(self) -> None:
        self._by_user: dict[str, str] = {}
        self._keys: dict[str, bytes] = {}

    def writing_key(self, user_id: str) -> tuple[str, bytes]:
        if user_id not in self._by_user:
            key_id = os.urandom(16).hex()
            self._by_user[user_id], self._keys[key_id] = key_id, AESGCM.generate_key(bit_length=256)
        key_id = self._by_user[user_id]
        return key_id, self._keys[key_id]

    def reading_key(self, key_id: str) -> bytes | None:
        return self._keys.get(key_id)

    def forget(self, user_id: str) -> bool:
        key_id = self._by_user.pop(user_id, None)
        return key_id is not None and self._keys.pop(key_id, None) is not None
