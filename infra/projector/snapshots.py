"""Snapshots in PostgreSQL: each reset and OTP stream's live part as jsonb, and a row per request.

The pure fold is ``projections.snapshots``; this module encodes its states
with the log's converter conventions (UUIDs and times as text), leaving out
every address and nonce: a request keeps the log position of the event that
carries its recipient and nonce, and a decision reading a snapshot opens those
events' envelopes under the user's data key. ``stream_requests`` holds every
request so, live or not; ``load_for_decision`` reads, with the live part, the
rows a call names by its keys (``Lookups``). ``SnapshotApplier`` folds
events into both tables inline (the unit of work passes the snapshot it
decided on, so nothing is read twice), and in rebuild, verify and replay.
"""

from __future__ import annotations

import functools

from collections import OrderedDict
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

import attrs
from attrs import frozen
from sqlalchemy import Connection, Table, text

from domain.counting import CountingRun, FloodTally
from domain.otp_events import otp_stream
from domain.request_rules import Receipt
from domain.log import RecordedEvent
from domain.otp_state import OtpChallenge, OtpState
from domain.reset_events import reset_stream
from domain.reset_state import ResetRequest, ResetState
from infra.db import tables
from infra.db.pipeline import execute_deferred
from infra.eventlog.codec import make_converter
from infra.eventlog.personal_data import FieldContext, Keyring, is_envelope
from infra.eventlog.queries import personal_fields_at, snapshots_for_decision
from infra.eventlog.subject_keys import PostgresKeyring
from infra.projector.appliers import qualified_name
from projections.receipts import receipt_id
from projections.snapshots import Request, Snapshot, State, evolve_snapshot, requests_of, snapshot_key

_converter = make_converter()
AnyRequest = TypeVar("AnyRequest", bound=Request)


# Built once per table and kept: a decision loads its stream's snapshot on every request, and building
# a text() parses its bind parameters anew each time (bench/api_profile.py).
@functools.cache
def _select(table: Table) -> Any:
    return text(f"""
        SELECT stream_id, version, state FROM {qualified_name(table)}
         WHERE stream_id = ANY(CAST(:stream_ids AS text[]))
    """)


@functools.cache
def _upsert(table: Table, requests: Table) -> Any:
    """A snapshot's row and the request rows its steps made, in one statement (a decision's hot path)."""
    return text(f"""
        WITH request_rows AS (
            INSERT INTO {qualified_name(requests)} (request_id, stream_id, recipient_at, request)
            SELECT r.request_id, r.stream_id, r.recipient_at, r.request
              FROM jsonb_to_recordset(CAST(:requests AS jsonb))
                   AS r(request_id uuid, stream_id text, recipient_at bigint, request jsonb)
            ON CONFLICT (request_id) DO UPDATE
               SET stream_id = EXCLUDED.stream_id, recipient_at = EXCLUDED.recipient_at, request = EXCLUDED.request
        )
        INSERT INTO {qualified_name(table)} (stream_id, version, state)
        VALUES (:stream_id, :version, CAST(:state AS jsonb))
        ON CONFLICT (stream_id) DO UPDATE SET version = EXCLUDED.version, state = EXCLUDED.state
    """)


def encode_state(snapshot: Snapshot) -> dict[str, Any]:
    """The jsonb of a snapshot's state: no address, and only JSON types, so that it compares as it reads back."""
    state = snapshot.state
    requests = state.requests if isinstance(state, ResetState) else state.challenges
    encoded: dict[str, Any] = {
        "live": True,  # cut to its live part (schema 5): its older requests have rows of their own
        "requests": [_without_personal(request) for request in requests.values()],
        "receipts": [[client, key, _converter.unstructure(receipt)]
                     for (client, key), receipt in state.receipts.items()],
        "run": _converter.unstructure(state.run) if state.run is not None else None,
        "request_times": _converter.unstructure(state.request_times),
        "recipient_at": {str(request_id): position for request_id, position in snapshot.recipient_at.items()},
    }
    if state.rejections is not None:  # absent until the first: snapshots made before stay equal to a rebuild
        encoded["rejections"] = _converter.unstructure(state.rejections)
    if state.flood is not None:  # likewise: a stream no flood has reached reads as it did before the ceiling
        encoded["flood"] = _converter.unstructure(state.flood)
    if isinstance(state, OtpState):
        encoded["account"] = [state.consecutive_failures, state.account_lockouts,
                              _converter.unstructure(state.locked_until)]
    return encoded


def _without_personal(request: ResetRequest | OtpChallenge) -> dict[str, Any]:
    data = _converter.unstructure(request)
    del data["recipient"], data["nonce"]
    if data["derivation"] == 1:  # as snapshots made before derivations were: they stay equal to a rebuild
        del data["derivation"]
    if data["locale"] is None:  # likewise for requests made without a language, and before there were any
        del data["locale"]
    return data


# Read back from the event a request was made with (``recipient_at`` names it), never from a snapshot row.
PERSONAL = ("recipient", "nonce")


def decode_snapshot(
    stream_id: str, version: int, encoded: Mapping[str, Any], personal: Mapping[str, Mapping[str, str | None]]
) -> Snapshot:
    """The snapshot a row holds, with each request's ``personal`` fields (opened) by request id as the row
    spells it (each id is parsed once, by the converter)."""
    recipient_at = {UUID(request_id): position for request_id, position in encoded["recipient_at"].items()}
    receipts = {(client, key): _converter.structure(receipt, Receipt) for client, key, receipt in encoded["receipts"]}
    run = _converter.structure(encoded["run"], CountingRun) if encoded["run"] is not None else None
    rejections = encoded.get("rejections")
    rejections = _converter.structure(rejections, CountingRun) if rejections is not None else None
    flood = encoded.get("flood")
    flood = _converter.structure(flood, FloodTally) if flood is not None else None
    state: State
    if "account" in encoded:
        challenges = [decode_request(data, personal[data["challenge_id"]], OtpChallenge)
                      for data in encoded["requests"]]
        failures, lockouts, locked = encoded["account"]
        locked_until = _converter.structure(locked, datetime) if locked is not None else None
        state = OtpState({c.challenge_id: c for c in challenges}, receipts, failures, lockouts, locked_until,
                         run, rejections, _request_times(encoded, [c.issued_at for c in challenges]), flood)
    else:
        requests = [decode_request(data, personal[data["request_id"]], ResetRequest)
                    for data in encoded["requests"]]
        state = ResetState({r.request_id: r for r in requests}, {r.token_hash: r.request_id for r in requests},
                           receipts, run, rejections, _request_times(encoded, [r.requested_at for r in requests]),
                           flood)
    # A snapshot from before schema 5 holds every request and none has a row: its next step writes them all.
    unwritten = {} if "live" in encoded else {
        request_id: (request, recipient_at[request_id]) for request_id, request in requests_of(state).items()}
    return Snapshot(stream_id, version, state, recipient_at, unwritten)


def _request_times(encoded: Mapping[str, Any], made: list[datetime]) -> tuple[datetime, ...]:
    """A snapshot's request times; a snapshot written before they were kept holds every request it counts."""
    if "request_times" in encoded:
        return _converter.structure(encoded["request_times"], tuple[datetime, ...])
    return tuple(sorted(made))


def decode_request(data: Mapping[str, Any], personal: Mapping[str, str | None], kind: type[AnyRequest]) -> AnyRequest:
    """A request or challenge as a snapshot or a request row spells it, with its ``personal`` fields opened."""
    return _converter.structure({**data, **personal}, kind)


def _personal(
    connection: Connection, keyring: Keyring | None, recipient_at: Mapping[str, int]
) -> dict[str, dict[str, str | None]]:
    """Each request's recipient and nonce, opened as the codec opens the event's (``[erased]`` once forgotten).

    Without a keyring none is read: the applier only writes snapshots, and
    no snapshot row holds an address or a nonce, so its states carry none.
    """
    if keyring is None or not recipient_at:
        return {request_id: {"recipient": "", "nonce": None} for request_id in recipient_at}
    return _opened(keyring, recipient_at, personal_fields_at(connection, list(recipient_at.values()), PERSONAL))


def _opened(
    keyring: Keyring, recipient_at: Mapping[str, int], found: Iterable[Sequence[Any]]
) -> dict[str, dict[str, str | None]]:
    """Each request's ``PERSONAL`` fields opened, from (position, event type, user id, sealed values) rows."""
    by_position = {}
    for position, tag, user_id, values in found:
        opened: dict[str, str | None] = {}
        for name, value in zip(PERSONAL, values, strict=True):
            if is_envelope(value):
                value = keyring.open(FieldContext(str(user_id), tag, name), value)
            opened[name] = value
        by_position[position] = opened
    return {request_id: by_position[position] for request_id, position in recipient_at.items()}


def load_snapshots(connection: Connection, stream_ids: Iterable[str], table: Table = tables.stream_snapshots,
                   keyring: Keyring | None = None) -> dict[str, Snapshot]:
    """The snapshots of these streams that exist, by stream id.

    With ``keyring`` their recipients are read from the log and opened, as a
    decision needs them; without, they are left out (empty).
    """
    found = connection.execute(_select(table), {"stream_ids": sorted(stream_ids)}).all()
    snapshots = {}
    for row in found:
        personal = _personal(connection, keyring, row.state["recipient_at"])
        snapshots[row.stream_id] = decode_snapshot(row.stream_id, row.version, row.state, personal)
    return snapshots


# stream id prefix -> the flow its receipts are kept under (projections.receipts)
_FLOWS = {reset_stream(""): "reset", otp_stream(""): "otp"}


@frozen
class Lookups:
    """What a call reads of a stream beyond its live part, by the keys it carries (``projections.snapshots``)."""

    request_ids: tuple[UUID, ...] = ()  # a code's challenge, a queued email's request
    token_hash: str | None = None  # a presented link's
    receipt: tuple[str | None, str] | None = None  # (client, idempotency key) of a create


NO_LOOKUPS = Lookups()


def receipt_lookup(client: str | None, idempotency_key: str | None) -> Lookups:
    """What a create reads beyond the live part: the receipt of its key, if it has one, and the request it names."""
    return Lookups(receipt=(client, idempotency_key)) if idempotency_key is not None else NO_LOOKUPS


@frozen
class StreamRead:
    """What a decision reads of one stream in its one statement."""

    snapshot: Snapshot | None  # its recipients and nonces opened; None for a stream without one
    last_version: int
    # The stream's ``request_counts`` rows, not yet written to it, as JSON objects (``infra.services.counts``).
    counts: Sequence[Mapping[str, Any]]
    # Older requests the call looked up (their recipients and nonces opened), and the receipt of its key.
    found: Sequence[Request] = ()
    receipts: Mapping[tuple[str | None, str], Receipt] = attrs.field(factory=dict)


def load_for_decision(
    connection: Connection, stream_ids: Sequence[str], keyring: PostgresKeyring,
    lookups: Mapping[str, Lookups] | None = None,
) -> dict[str, StreamRead]:
    """Each stream's snapshot (None if it has none), its recipients and nonces opened, its last version, its
    counts not yet written, and what ``lookups`` names of it beyond its live part.

    One statement (``snapshots_for_decision``), whatever the streams' lengths
    or histories, where ``load_snapshots``, the events after the snapshot and
    the user's writing key took up to five: a decision reads this for its
    stream on every request, delivery's fresh read for a batch's streams.
    ``keyring`` learns the keys read, and which key each stream's user writes
    with; the caller reads the events after a snapshot only when the last
    version is past it. A token or a receipt is looked up for one stream only.
    """
    lookups = lookups or {}
    # A snapshotted stream is "<flow>-user:<scoped user id>".
    users = {stream_id: stream_id.partition(":")[2] for stream_id in stream_ids}
    request_ids = [request_id for stream_id in stream_ids
                   for request_id in lookups.get(stream_id, NO_LOOKUPS).request_ids]
    token_hash, receipt = None, None
    if len(stream_ids) == 1:
        [stream_id] = stream_ids
        asked = lookups.get(stream_id, NO_LOOKUPS)
        token_hash = asked.token_hash
        if asked.receipt is not None:
            flow = next(flow for prefix, flow in _FLOWS.items() if stream_id.startswith(prefix))
            receipt = receipt_id(flow, asked.receipt[0], users[stream_id], asked.receipt[1])
    rows = snapshots_for_decision(connection, users, PERSONAL, request_ids=request_ids, token_hash=token_hash,
                                  receipt_id=receipt)
    by_stream: dict[str, list[Any]] = {stream_id: [] for stream_id in stream_ids}
    for row in rows:
        by_stream[row.stream_id].append(row)
    return {stream_id: _decided(stream_id, stream_rows, keyring, lookups.get(stream_id, NO_LOOKUPS))
            for stream_id, stream_rows in by_stream.items()}


def _decided(stream_id: str, rows: Sequence[Any], keyring: PostgresKeyring, asked: Lookups) -> StreamRead:
    head = next(row for row in rows if row.first)
    user_id = stream_id.partition(":")[2]
    keyring.expect_keys(user_id, list(zip(head.key_ids, head.master_key_ids, head.wrapped_keys, strict=True))
                        if head.key_ids is not None else [])
    counts = json.loads(head.counts_json) if head.counts_json is not None else ()
    if head.version is None:
        return StreamRead(None, head.last_version, counts)
    sealed = [(row.global_position, row.event_type, row.user_id, row.field_values)
              for row in rows if row.global_position is not None]
    state = json.loads(head.state_json)
    found_rows = json.loads(head.found_json) if head.found_json is not None else []
    # Each request id as its row spells it -> the position of the event carrying its personal fields.
    kind = OtpChallenge if "account" in state else ResetRequest
    id_field = "challenge_id" if kind is OtpChallenge else "request_id"
    at = {**state["recipient_at"], **{request[id_field]: position for position, request in found_rows}}
    personal = _opened(keyring, at, sealed) if at else {}
    found = [decode_request(request, personal[request[id_field]], kind) for _, request in found_rows]
    receipts = {}
    if asked.receipt is not None and head.receipt_request_id is not None:
        receipts = {asked.receipt: Receipt(head.receipt_request_id, head.receipt_created_at)}
    return StreamRead(decode_snapshot(stream_id, head.version, state, personal), head.last_version, counts,
                      found, receipts)


class SnapshotApplier:
    """Folds events into ``stream_snapshots`` and ``stream_requests`` (or shadows of them): a row per
    snapshotted stream, holding its live part, and a row per request or challenge.

    Shaped like ``KeyedApplier``, so inline folding, rebuild, verify and
    replay treat it alike. ``evolve`` names the pure fold it applies.
    """

    evolve = staticmethod(evolve_snapshot)

    def __init__(self, table: Table = tables.stream_snapshots, requests: Table = tables.stream_requests, *,
                 cache_rows: int = 0) -> None:
        self.table, self.requests, self.cache_rows = table, requests, cache_rows
        self.tables: tuple[Table, ...] = (table, requests)
        self._select, self._upsert = _select(table), _upsert(table, requests)
        self._cache: OrderedDict[str, Snapshot] = OrderedDict()

    @property
    def name(self) -> str:
        return self.table.name

    def on(self, tables: Mapping[str, Table], *, cache_rows: int = 0) -> SnapshotApplier:
        return SnapshotApplier(tables[self.table.name], tables[self.requests.name], cache_rows=cache_rows)

    def fold(self, recorded: Iterable[RecordedEvent]) -> dict[str, list[dict[str, Any]]]:
        rows: dict[str, Snapshot | None] = {}
        changed = self._step(rows, recorded)
        return {self.table.name: [_row(snapshot) for snapshot in changed.values()],
                self.requests.name: [_request_row(snapshot.stream_id, request_id, request, position)
                                     for snapshot in changed.values()
                                     for request_id, (request, position) in snapshot.unwritten.items()]}

    def apply(
        self, connection: Connection, recorded: Sequence[RecordedEvent], *,
        loaded: dict[str, Snapshot | None] | None = None,
    ) -> int:
        """Fold ``recorded`` into the tables, with the request rows the snapshots' steps made.

        ``loaded`` holds, by stream id, the snapshots the caller already read
        (None: the stream has none yet); they are not read again.
        """
        keys = {key for r in recorded if (key := snapshot_key(r)) is not None}
        if not keys:
            return 0
        rows: dict[str, Snapshot | None] = loaded if loaded is not None else {}
        rows.update((key, self._cache[key]) for key in keys if key in self._cache and key not in rows)
        missing = keys - rows.keys()
        if missing:  # without their recipients: no snapshot row holds one, so the fold needs none
            rows.update(load_snapshots(connection, missing, self.table))
        try:
            changed = self._step(rows, recorded)
            values = [{**_row(snapshot, encoded=True), "requests": json.dumps(
                [_request_row(snapshot.stream_id, request_id, request, position, encoded=True)
                 for request_id, (request, position) in snapshot.unwritten.items()], separators=(",", ":"))}
                for snapshot in changed.values()]
            execute_deferred(connection, self._upsert, values if len(values) > 1 else values[0])
        except BaseException:
            self._cache.clear()
            raise
        written = {key: attrs.evolve(snapshot, unwritten={}) for key, snapshot in changed.items()}
        rows.update(written)
        self._remember(written)
        return len(changed)

    @staticmethod
    def _step(rows: dict[str, Snapshot | None], recorded: Iterable[RecordedEvent]) -> dict[str, Snapshot]:
        changed = {}
        for r in recorded:
            key = snapshot_key(r)
            if key is not None:
                rows[key] = changed[key] = evolve_snapshot(rows.get(key), r)
        return changed

    def _remember(self, changed: Mapping[str, Snapshot]) -> None:
        if not self.cache_rows:
            return
        for key, snapshot in changed.items():
            self._cache[key] = snapshot
            self._cache.move_to_end(key)
        while len(self._cache) > self.cache_rows:
            self._cache.popitem(last=False)

    def forget(self) -> None:
        """Drop the cache, after a transaction that wrote through it rolled back."""
        self._cache.clear()


def _row(snapshot: Snapshot, *, encoded: bool = False) -> dict[str, Any]:
    state = encode_state(snapshot)
    return {"stream_id": snapshot.stream_id, "version": snapshot.version,
            "state": json.dumps(state, separators=(",", ":")) if encoded else state}


def _request_row(stream_id: str, request_id: UUID, request: Request, position: int, *,
                 encoded: bool = False) -> dict[str, Any]:
    """A request row; ``encoded`` as ``_upsert`` reads it (ids as text), else as the table reads back."""
    return {"request_id": str(request_id) if encoded else request_id, "stream_id": stream_id,
            "recipient_at": position, "request": _without_personal(request)}
