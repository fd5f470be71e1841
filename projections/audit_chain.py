"""The hash chain over the log: canonical event bytes, links, and the check of a chain.

Pure: no I/O. The sealer (``infra.audit.seal``), the exporter and the offline
verifier share these functions, so a seal written by one is checked by the
others byte for byte. docs/audit.md is the specification for auditors.

Every event, in the log's horizon order ``(transaction_id, global_position)``,
becomes one leaf; the chain folds the leaves with RFC 6962's domain
separation, so that a leaf can never be passed off as a link or vice versa::

    leaf_n = SHA-256(0x00 || canonical(event_n))
    link_n = SHA-256(0x01 || link_{n-1} || leaf_n)      link_{-1} = 32 zero bytes

``canonical`` is JSON with sorted keys, no whitespace, UTF-8 (not \\u-escaped),
of the event's position, stream, version, id, type, schema version, payload,
metadata and recording time (UTC, microseconds, ``Z``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from attrs import field, frozen

GENESIS = bytes(32)
LEAF_PREFIX = b"\x00"
LINK_PREFIX = b"\x01"
PROGRESS_STEP = 1000  # report progress in steps, not per event: a million calls cost a second


def format_time(moment: datetime) -> str:
    """UTC, always with microseconds: one instant has exactly one spelling."""
    if moment.tzinfo is None:
        raise ValueError("recorded_at must carry a time zone")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def leaf_hash(canonical: bytes) -> bytes:
    return hashlib.sha256(LEAF_PREFIX + canonical).digest()


def next_link(previous: bytes, leaf: bytes) -> bytes:
    return hashlib.sha256(LINK_PREFIX + previous + leaf).digest()


@frozen
class LoggedEvent:
    """An event exactly as stored: the columns the chain covers, plus its place in horizon order."""

    global_position: int
    transaction_id: int
    stream_id: str
    stream_version: int
    event_id: str
    event_type: str
    schema_version: int
    payload: Any
    metadata: Any
    recorded_at: str  # already canonical, see format_time

    @property
    def key(self) -> tuple[int, int]:
        return (self.transaction_id, self.global_position)

    def document(self) -> dict[str, Any]:
        """The object whose canonical JSON is hashed; exports carry it verbatim."""
        return {
            "event_id": self.event_id,
            "event_type": self.event_type,
            "global_position": self.global_position,
            "metadata": self.metadata,
            "payload": self.payload,
            "recorded_at": self.recorded_at,
            "schema_version": self.schema_version,
            "stream_id": self.stream_id,
            "stream_version": self.stream_version,
        }

    def canonical(self) -> bytes:
        return canonical_json(self.document())

    @classmethod
    def from_document(cls, document: Mapping[str, Any], transaction_id: int) -> LoggedEvent:
        return cls(
            global_position=document["global_position"],
            transaction_id=transaction_id,
            stream_id=document["stream_id"],
            stream_version=document["stream_version"],
            event_id=document["event_id"],
            event_type=document["event_type"],
            schema_version=document["schema_version"],
            payload=document["payload"],
            metadata=document["metadata"],
            recorded_at=document["recorded_at"],
        )


@frozen
class Seal:
    """One link of the chain as stored in ``seals``."""

    chain_index: int
    global_position: int
    transaction_id: int
    stream_id: str
    stream_version: int
    link: bytes = field(repr=lambda link: link.hex())

    @property
    def key(self) -> tuple[int, int]:
        return (self.transaction_id, self.global_position)


@frozen
class Finding:
    """The first place where the log and its chain disagree."""

    kind: str  # changed, deleted, inserted, moved, seal-missing, seals-out-of-order, digest-mismatch
    chain_index: int | None
    global_position: int | None  # None: an export's elided line, whose event the export does not show
    stream_id: str | None
    stream_version: int | None
    detail: str

    def describe(self) -> str:
        where = f"event {self.stream_id} v{self.stream_version}" if self.stream_id is not None else "an event"
        at = f" at position {self.global_position}" if self.global_position is not None else ""
        index = f" (chain index {self.chain_index})" if self.chain_index is not None else ""
        return f"{self.kind}: {where}{at}{index}: {self.detail}"


@frozen
class ChainCheck:
    """What a check of events against seals found."""

    checked: int
    first_index: int | None
    last_index: int | None
    head_link: bytes | None = field(repr=lambda link: link.hex() if link else "None")
    finding: Finding | None
    links_at: dict[int, bytes] = field(factory=dict)

    @property
    def ok(self) -> bool:
        return self.finding is None


def link_events(events: Iterable[LoggedEvent], previous: bytes = GENESIS) -> Iterable[tuple[LoggedEvent, bytes]]:
    """Each event with its link, continuing the chain from ``previous``."""
    link = previous
    for event in events:
        link = next_link(link, leaf_hash(event.canonical()))
        yield event, link


def check_chain(
    events: Iterable[LoggedEvent],
    seals: Iterable[Seal],
    *,
    anchor: bytes = GENESIS,
    first_index: int = 0,
    locate_event: Callable[[int], LoggedEvent | None] = lambda position: None,
    locate_seal: Callable[[int], Seal | None] = lambda position: None,
    watch: Iterable[int] = (),
    on_entry: Callable[[LoggedEvent, Seal], None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> ChainCheck:
    """Recompute the chain from ``events`` and compare it with ``seals``; stop at the first disagreement.

    ``events`` are every event between the first and the last seal in
    horizon order; ``seals`` the seals from ``first_index`` in chain order,
    the first continuing from ``anchor``. The two walk side by side: a seal
    with no event at its place is a deleted (or moved) event, an event with
    no seal at its place an inserted (or moved) one. ``locate_*`` find an
    event or seal by position elsewhere, to tell a move from an insertion.
    ``watch`` names chain indexes whose recomputed link the caller wants (a
    digest check); ``on_entry`` sees every event that matched its seal.
    """
    wanted = set(watch)
    links_at: dict[int, bytes] = {}
    pending = iter(events)
    event = next(pending, None)
    link = anchor
    expected_index = first_index
    previous_key: tuple[int, int] | None = None
    checked = 0

    def result(finding: Finding | None) -> ChainCheck:
        last = expected_index - 1 if checked else None
        return ChainCheck(checked, first_index if checked else None, last, link if checked else None, finding, links_at)

    for seal in seals:
        if seal.chain_index != expected_index:
            return result(_seal_missing(seal, expected_index))
        if previous_key is not None and seal.key <= previous_key:
            return result(Finding("seals-out-of-order", seal.chain_index, seal.global_position, seal.stream_id,
                                  seal.stream_version, "its seal does not follow the previous one in horizon order"))
        if event is None or event.key > seal.key:
            return result(_missing_event(seal, locate_event))
        if event.key < seal.key:
            return result(_unsealed_event(event, seal, locate_seal))
        link = next_link(link, leaf_hash(event.canonical()))
        if link != seal.link:
            return result(_changed(event, seal))
        if seal.chain_index in wanted:
            links_at[seal.chain_index] = link
        if on_entry is not None:
            on_entry(event, seal)
        checked += 1
        expected_index += 1
        previous_key = seal.key
        if progress is not None and checked % PROGRESS_STEP == 0:
            progress(PROGRESS_STEP)
        event = next(pending, None)
    if event is not None:
        return result(_unsealed_event(event, None, locate_seal))
    if progress is not None:
        progress(checked % PROGRESS_STEP)
    return result(None)


def _seal_missing(seal: Seal, expected_index: int) -> Finding:
    return Finding("seal-missing", expected_index, seal.global_position, seal.stream_id, seal.stream_version,
                   f"the seal with chain index {expected_index} is gone; the next one is {seal.chain_index}")


def _missing_event(seal: Seal, locate_event: Callable[[int], LoggedEvent | None]) -> Finding:
    found = locate_event(seal.global_position)
    if found is None:
        return Finding("deleted", seal.chain_index, seal.global_position, seal.stream_id, seal.stream_version,
                       "the event was sealed but is no longer in the log")
    return Finding("moved", seal.chain_index, seal.global_position, seal.stream_id, seal.stream_version,
                   f"the event's transaction id changed from {seal.transaction_id} to {found.transaction_id}, "
                   "so it is no longer at its sealed place in the log's order")


def _unsealed_event(event: LoggedEvent, seal: Seal | None, locate_seal: Callable[[int], Seal | None]) -> Finding:
    sealed = locate_seal(event.global_position)
    index = seal.chain_index if seal is not None else None
    if sealed is not None:
        return Finding("moved", sealed.chain_index, event.global_position, event.stream_id, event.stream_version,
                       f"the event's transaction id changed from {sealed.transaction_id} to {event.transaction_id}, "
                       "so it is no longer at its sealed place in the log's order")
    return Finding("inserted", index, event.global_position, event.stream_id, event.stream_version,
                   "the event lies inside the sealed part of the log but has no seal: it was added afterwards")


def _changed(event: LoggedEvent, seal: Seal) -> Finding:
    if (event.stream_id, event.stream_version) != (seal.stream_id, seal.stream_version):
        detail = (f"sealed as {seal.stream_id} v{seal.stream_version}, the log now holds "
                  f"{event.stream_id} v{event.stream_version} there")
    else:
        detail = "its content no longer matches its seal"
    return Finding("changed", seal.chain_index, seal.global_position, seal.stream_id, seal.stream_version, detail)
