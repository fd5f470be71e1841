"""Events to and from JSON payloads: the one cattrs converter of authledger.

Validation and serialization are concerns of the edge, so the domain's event
classes know nothing of JSON. Every class is stored under an explicit tag
(``infra.eventlog.tags``); old payloads are brought up to date by upcasters,
plain functions keyed by (tag, version) that turn version N into N + 1.

Personal fields (``PERSONAL_FIELDS``) are encrypted here too, under the data
key of the event's user (``infra.eventlog.personal_data``): encoding takes a keyring,
and decoding opens every envelope in a payload, before any upcaster, under
the field name it was sealed with. A field whose key was destroyed decodes as
``"[erased]"``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

import cattrs

from domain.errors import UnknownEventType
from domain.log import RecordedEvent
from infra.errors import PersonalDataUnreadable
from infra.eventlog.tags import EVENT_TYPES, PERSONAL_FIELDS
from infra.eventlog.personal_data import FieldContext, Keyring, is_envelope
from infra.eventlog.upcasters import UPCASTERS, Upcaster


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)
    converter.register_unstructure_hook(UUID, str)
    converter.register_structure_hook(UUID, lambda value, _: UUID(value))
    converter.register_unstructure_hook(datetime, datetime.isoformat)
    converter.register_structure_hook(datetime, lambda value, _: datetime.fromisoformat(value))
    return converter


def make_converter() -> cattrs.Converter:
    """A converter with the log's conventions (UUIDs and times as text), for other jsonb the project stores."""
    return _make_converter()


class EventCodec:
    """Encodes domain events as (tag, version, payload) and decodes them back."""

    def __init__(
        self,
        event_types: Mapping[str, tuple[type, int]] = EVENT_TYPES,
        upcasters: Mapping[tuple[str, int], Upcaster] | None = None,
        personal_fields: Mapping[str, tuple[str, ...]] = PERSONAL_FIELDS,
    ) -> None:
        self._by_tag = dict(event_types)
        self._personal = dict(personal_fields)
        self._tag_of = {cls: tag for tag, (cls, _) in event_types.items()}
        self._upcasters = dict(upcasters or {})
        self._converter = _make_converter()

    def encode(self, event: Any, keyring: Keyring | None = None) -> tuple[str, int, dict[str, Any]]:
        """(tag, version, payload); personal fields sealed with ``keyring``, which they require."""
        tag = self._tag_of.get(type(event))
        if tag is None:
            raise UnknownEventType(f"{type(event).__name__} has no registered event tag")
        payload = self._converter.unstructure(event)
        for name in self._personal.get(tag, ()):
            if isinstance(payload[name], str):
                if keyring is None:
                    raise PersonalDataUnreadable(f"{tag}.{name} is personal data: encoding it needs a keyring")
                payload[name] = keyring.seal(FieldContext(payload["user_id"], tag, name), payload[name])
        return tag, self._by_tag[tag][1], payload

    def encode_json(self, event: Any, keyring: Keyring | None = None) -> tuple[str, int, str]:
        tag, version, payload = self.encode(event, keyring)
        return tag, version, json.dumps(payload, separators=(",", ":"))

    def decode(self, tag: str, version: int, payload: Mapping[str, Any], keyring: Keyring | None = None) -> Any:
        known = self._by_tag.get(tag)
        if known is None:
            raise UnknownEventType(
                f"the log holds an event of unknown type {tag!r} (version {version}); "
                "this authledger is older than the data it reads"
            )
        cls, current = known
        data = self.open_personal(tag, payload, keyring)
        while version < current:
            upcast = self._upcasters.get((tag, version))
            if upcast is None:
                raise UnknownEventType(f"no upcaster from {tag} version {version} to {version + 1}")
            data, version = upcast(data), version + 1
        if version > current:
            raise UnknownEventType(f"{tag} version {version} is newer than this authledger ({current})")
        try:
            return self._converter.structure(data, cls)
        except (cattrs.BaseValidationError, ValueError, TypeError) as error:
            raise UnknownEventType(f"{tag} version {version} payload does not match its class: {error}") from error

    def decode_row(self, row: Any, keyring: Keyring | None = None) -> RecordedEvent:
        """One row of ``events`` (any query selecting its columns) as a recorded event."""
        return RecordedEvent(
            global_position=row.global_position,
            stream_id=row.stream_id,
            stream_version=row.stream_version,
            event_id=row.event_id if isinstance(row.event_id, UUID) else UUID(str(row.event_id)),
            event_type=row.event_type,
            schema_version=row.schema_version,
            event=self.decode(row.event_type, row.schema_version, row.payload, keyring),
            metadata=row.metadata if row.metadata is not None else {},
            recorded_at=row.recorded_at,
            transaction_id=int(row.transaction_id),
        )

    def open_personal(self, tag: str, payload: Mapping[str, Any], keyring: Keyring | None) -> dict[str, Any]:
        """A copy of a stored payload (of event type ``tag``) with its personal fields opened by ``keyring``."""
        # Only the personal fields: any other field may hold text a client
        # chose (an idempotency key, a user id) that starts like an envelope.
        data = dict(payload)
        for name in self._personal.get(tag, ()):
            value = payload.get(name)
            if is_envelope(value):
                if keyring is None:
                    raise PersonalDataUnreadable(f"{tag}.{name} is encrypted: decoding it needs a keyring")
                data[name] = keyring.open(FieldContext(str(payload.get("user_id")), tag, name), value)
        return data

    def tags(self) -> list[str]:
        return sorted(self._by_tag)


_default: EventCodec | None = None


def default_codec() -> EventCodec:
    """The codec with every registered event type and upcaster."""
    global _default
    if _default is None:
        _default = EventCodec(EVENT_TYPES, UPCASTERS)
    return _default
