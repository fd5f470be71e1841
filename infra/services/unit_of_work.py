"""The unit of work: load a stream, decide, append, fold the read models; one transaction.

``append_and_fold`` is the one write path: the only caller of the event
store's append, it folds what it appended into the inline projections in the
same transaction. Service functions are a few lines on top of
``decide_on_stream``, which serialises the writers of a stream: it takes a
transaction-scoped advisory lock on the stream before loading it, so two
concurrent requests for one user and flow are decided one after the other,
the second on what the first committed. A reset or OTP stream is loaded from
its snapshot (``projections.snapshots``) plus the events after it, so a
decision costs the same on a stream of ten events or a hundred thousand; a
call the domain counts rather than logs (``Decision.counted``) bumps a
counter row, and the stream's next append first writes those counts as
``RequestsCounted`` (``infra.services.counts``; ``write_closed_counts``
writes a closed window's without waiting for it), unless the window has
reached its ceiling of events from floods: then only its close does.
Requests with an idempotency key take an advisory lock on the key first
(always key, then stream: no two transactions can wait for each other;
``infra.services.locks``), so that retries in flight wait for (or are
refused while) the first one runs. The time a decision is stamped with is
read after the locks are held, so a stream's event times never go backwards.
The transaction is pipelined (``infra.db.pipeline``): it waits for the
server where it reads, the rows the append will fold are asked for with the
append, and its writes go with the COMMIT.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

import attrs
from attrs import field, frozen
from sqlalchemy import Connection, Engine, Row

from domain.counting import counts_fit
from domain.decisions import Decision
from domain.delivery import DeliveryPolicy
from domain.email import email_stream
from domain.webhooks import WEBHOOK_FLOW, WebhookEvent, email_event_of, user_event_of, webhook_stream
from domain.errors import ConcurrencyConflict
from domain.fairness import FairnessPolicy
from domain.log import RecordedEvent
from domain.policy import OtpPolicy, ResetPolicy
from domain.send_limits import SendLimits
from domain.templates import TemplateSets
from domain.tenants import DEFAULT_PURPOSES, Purpose
from domain.tokens import NONCE_BYTES, TokenKeys, nonce_text
from projections.snapshots import Snapshot, evolve_snapshot, fold_of, with_found
from infra.clock import Clock, SystemClock
from infra.db.pipeline import pipelined_transaction
from infra.emails.templates import default_templates
from infra.eventlog.codec import default_codec
from infra.eventlog.email_leases import append_fenced, claim_due_leases
from infra.projector.inline import SNAPSHOTS, apply_inline, ask_inline
from infra.projector.snapshots import NO_LOOKUPS, Lookups, load_for_decision
from infra.services.counts import count_call, counted_events, take_counts
from infra.services.locks import IdempotencyLock, lock_stream
from infra.services.webhook_routes import deliveries_for, email_facts
from infra.eventlog.postgres import PostgresEventStore
from infra.eventlog.subject_keys import PostgresKeyring
from infra.eventlog.ids import time_ordered_id

# The stream lock makes a conflict on a user's stream impossible between
# services; the retry stays as a safety net for writers that skip the lock.
CONFLICT_RETRIES = 5
FIRST_BACKOFF_SECONDS = 0.005
Batches = Sequence[tuple[str, int, Sequence[object]]]  # (stream_id, expected_version, events)
# A stream found on the decision's own connection, before its lock (whose link a token is): the look-up
# shares the decision's transaction rather than taking a connection and a transaction of its own.
StreamOf = Callable[[Connection], str]
# Checks a decision against limits kept outside its stream, on its connection, before it is appended.
Admit = Callable[[Connection, Any, datetime], None]
Decided = TypeVar("Decided")
Event = TypeVar("Event")


def random_nonce() -> str:
    """A new request's secret nonce: ``NONCE_BYTES`` from the operating system's CSPRNG."""
    return nonce_text(os.urandom(NONCE_BYTES))


@frozen
class ServiceContext:
    """What every service function needs; built by ``App`` or by a test."""

    engine: Engine
    # The keys, or how to load them: loaded on first use, so that services
    # which need none (clients, privacy) run where none are configured.
    _keys: TokenKeys | Callable[[], TokenKeys] = field(repr=False, alias="keys")
    clock: Clock = field(factory=SystemClock)
    reset_policy: ResetPolicy = field(factory=ResetPolicy)
    otp_policy: OtpPolicy = field(factory=OtpPolicy)
    delivery_policy: DeliveryPolicy = field(factory=DeliveryPolicy)
    send_limits: SendLimits = field(factory=SendLimits)  # per address and per end-user IP (domain.send_limits)
    # Request rates and in-flight caps at the HTTP edge (infra/http/fairness.py). None, as tests and in-process
    # callers build it: nothing is limited; ``App`` builds it from the settings, defaults included.
    fairness: FairnessPolicy | None = None
    reset_url: str = "http://localhost:8000/reset"
    # What emails name as the product and where to get help, for a tenant that names neither.
    product_name: str = "authledger"
    support_contact: str | None = None
    email_templates: TemplateSets = field(factory=default_templates)
    # The OTP purposes of a tenant that declares none (AUTHLEDGER_OTP_PURPOSES; domain.tenants).
    otp_purposes: tuple[Purpose, ...] = DEFAULT_PURPOSES
    new_id: Callable[[], UUID] = time_ordered_id  # request, challenge and message ids: see infra/eventlog/ids.py
    # The secret of each new request and challenge (domain.tokens, derivation 2); generated here, as ids are.
    new_nonce: Callable[[], str] = field(default=random_nonce, repr=False)
    # The read replica's engine (AUTHLEDGER_READ_DATABASE_URL, marked by infra.db.replica.on_replica), or None.
    replica_engine: Engine | None = None

    @property
    def read_engine(self) -> Engine:
        """Where reading work goes (the timeline, the console's reading pages): the replica if there is one.
        Never for a read that decides a write: that reads ``engine``, the primary."""
        return self.replica_engine if self.replica_engine is not None else self.engine

    @property
    def keys(self) -> TokenKeys:
        """The token keys, loaded now if they were given as a loader."""
        if not isinstance(self._keys, TokenKeys):
            object.__setattr__(self, "_keys", self._keys())  # frozen, but a cache: loading twice is harmless
        assert isinstance(self._keys, TokenKeys)
        return self._keys


def append_and_fold(
    connection: Connection, batches: Batches, metadata: Mapping[str, Any] | None = None, *,
    loaded: Mapping[str, dict[Any, Any]] | None = None, store: PostgresEventStore | None = None,
) -> list[RecordedEvent]:
    """Append to several streams in one statement and fold the events into the inline projections.

    The only caller of the store's append, so no write can leave a read model
    behind. ``loaded`` holds, by projection name and key, rows the caller
    already read and locked (the outbox's claimed messages): they are folded
    instead of read again, and updated in place with the rows written.
    ``store`` is the one the caller read with on this connection, so that
    the data keys it learnt are not asked for again.
    """
    # The rows the events will fold are asked for first, so that they come back with the append's answer.
    asked = ask_inline(connection, [event for _, _, events in batches for event in events], loaded)
    recorded = (store or PostgresEventStore(connection)).append_many(batches, metadata)
    apply_inline(connection, recorded, loaded, asked)
    facts = [fact for r in recorded
             if (fact := user_event_of(r.event_type, r.stream_id, r.event, event_id=r.event_id)) is not None]
    _queue_webhooks(connection, facts + email_facts(connection, recorded), metadata)
    return recorded  # the caller's events only: the deliveries they queued are the webhooks' own business


def _queue_webhooks(
    connection: Connection, facts: Sequence[WebhookEvent], metadata: Mapping[str, Any] | None,
) -> None:
    """The deliveries of ``facts`` to the endpoints listening, appended beside them (``webhook_routes``)."""
    queued = deliveries_for(connection, facts)
    if queued:
        append_and_fold(connection, [(webhook_stream(q.delivery_id), 0, [q]) for q in queued], metadata)


def claim_leases(
    connection: Connection, *, owner: str, limit: int, now: datetime, lease_expires_at: datetime,
    tokens: Sequence[UUID],
) -> list[Row[Any]]:
    """The delivery claim, set-based: one statement appends the claims' events and folds them into the outbox.

    The other way into the log beside ``append_and_fold``, for the one write
    whose rows are only known to the statement itself (SKIP LOCKED picks
    them). It writes the ``LeaseExpired``/``LeaseClaimed`` events the codec
    would and the rows ``evolve_outbox`` would; tests compare both.
    """
    return claim_due_leases(connection, owner=owner, limit=limit, now=now, lease_expires_at=lease_expires_at,
                            tokens=tokens, metadata={"actor": owner})


def record_fenced(
    connection: Connection, folded: Sequence[tuple[Any, UUID, int, Sequence[object]]], *, owner: str,
) -> set[UUID]:
    """Append outcome events to email streams whose lease still holds, in one statement; the message ids written.

    ``folded`` holds (new outbox row, lease token held, stream version held,
    events): the row is the caller's pure fold of the events onto the row it
    claimed, written only if the lease token and version are still those.
    """
    codec, keyring = default_codec(), PostgresKeyring(connection)
    rows, events, facts = [], [], []
    for row, held_token, held_version, appended in folded:
        rows.append({**attrs.asdict(row, recurse=False), "held_token": held_token, "held_version": held_version})
        for offset, event in enumerate(appended, start=1):
            tag, version, payload = codec.encode(event, keyring)
            event_id = time_ordered_id()
            events.append({"message_id": row.message_id, "stream_id": outbox_stream(row),
                           "stream_version": held_version + offset, "event_id": event_id, "event_type": tag,
                           "schema_version": version, "payload": payload})
            fact = None if row.flow == WEBHOOK_FLOW else email_event_of(
                tag, event, scoped_user_id=row.user_id, message_id=row.message_id, request_id=row.request_id,
                event_id=event_id)
            if fact is not None:
                facts.append((row.message_id, fact))
    if not rows:
        return set()
    recorded = append_fenced(connection, rows, events, {"actor": owner})
    # An email's outcome tells the application, in the same transaction; not a lease taken over (not recorded).
    _queue_webhooks(connection, [fact for message_id, fact in facts if message_id in recorded], {"actor": owner})
    return recorded


def outbox_stream(row: Any) -> str:
    """The stream of an outbox row: its email's, or its webhook delivery's."""
    return webhook_stream(row.message_id) if row.flow == WEBHOOK_FLOW else email_stream(row.message_id)


def record_decision(
    connection: Connection, stream_id: str, expected_version: int, decision: Decision,
    metadata: Mapping[str, Any] | None,
) -> list[RecordedEvent]:
    """Append a decision's events and emails in one statement and fold them inline."""
    return append_and_fold(connection, _decision_batches(stream_id, expected_version, decision), metadata)


def _decision_batches(stream_id: str, expected_version: int, decision: Decision) -> Batches:
    batches: list[tuple[str, int, Sequence[object]]] = [(stream_id, expected_version, decision.events)]
    batches += [(email_stream(queued.message_id), 0, [queued]) for queued in decision.emails]
    return batches


def decide_on_stream(
    ctx: ServiceContext,
    stream_id: str | StreamOf,
    fold: Callable[[Iterable[object]], Any],
    decide: Callable[[Any, datetime], Decision],
    metadata: Mapping[str, Any] | None = None,
    *,
    idempotency_lock: IdempotencyLock | None = None,
    lookups: Lookups = NO_LOOKUPS,
    admit: Admit | None = None,
) -> Decision:
    """Lock the stream, load it, decide on its state and the time now, append the result.

    ``decide(state, now)`` is called with ``now`` read from ``ctx.clock``
    once the locks are held, in the transaction that commits. With
    ``idempotency_lock`` the key is locked first, so the decision reads
    whatever the key's first request committed. ``stream_id`` may be a
    look-up (``StreamOf``) run first in the same transaction; what it raises
    ends the transaction with nothing written. ``lookups`` names what the
    decision reads beyond the stream's live part, by the keys its call
    carries (``projections.snapshots``): the state it is given holds them.
    ``admit(connection, decision, now)`` runs before anything is appended:
    what it raises (a limit met, ``infra.services.send_limits``) rolls the
    whole transaction back, so a refused call writes nothing.
    """
    return _serialised(ctx, stream_id, fold, decide, _decision_batches, metadata, idempotency_lock, lookups, admit)


def decide_events_on_stream(
    ctx: ServiceContext,
    stream_id: str | StreamOf,
    fold: Callable[[Iterable[object]], Any],
    decide: Callable[[Any, datetime], list[Event]],
    metadata: Mapping[str, Any] | None = None,
) -> list[Event]:
    """``decide_on_stream`` for streams whose decisions are plain lists of events (clients, provider feedback)."""
    return _serialised(ctx, stream_id, fold, decide,
                       lambda stream, version, events: [(stream, version, events)], metadata, None, NO_LOOKUPS, None)


def record_events(
    ctx: ServiceContext, stream_id: str, events: list[object], metadata: Mapping[str, Any] | None = None
) -> None:
    """Append facts that need no decision (a provider outage a worker saw) at the end of ``stream_id``."""
    decide_events_on_stream(ctx, stream_id, list, lambda _state, _now: list(events), metadata)


def _serialised(
    ctx: ServiceContext,
    stream_of: str | StreamOf,
    fold: Callable[[Iterable[object]], Any],
    decide: Callable[[Any, datetime], Decided],
    batches_of: Callable[[str, int, Decided], Batches],
    metadata: Mapping[str, Any] | None,
    idempotency_lock: IdempotencyLock | None,
    lookups: Lookups,
    admit: Admit | None,
) -> Decided:
    for attempt in range(CONFLICT_RETRIES):
        try:
            # Pipelined: the locks go out with the read, the rows with the COMMIT.
            with pipelined_transaction(ctx.engine) as connection:
                stream_id = stream_of if isinstance(stream_of, str) else stream_of(connection)
                locks = (idempotency_lock.take_with_stream(connection, stream_id) if idempotency_lock is not None
                         else lock_stream(connection, stream_id))
                store = PostgresEventStore(connection)  # one keyring for the read and the write
                folded = _load_folded(store, {stream_id: fold}, {stream_id: lookups})[stream_id]
                locks.confirm()  # the key's answer came with the read: a refused request rolls back here
                now = ctx.clock.now()
                decided = decide(folded.state, now)
                if admit is not None:
                    admit(connection, decided, now)
                batches = _with_counts(connection, stream_id, batches_of(stream_id, folded.version, decided),
                                       folded, decided, now)
                # The snapshot decided on, or None for a stream that has none yet: never read twice.
                loaded = {SNAPSHOTS.name: {stream_id: folded.snapshot}} if fold_of(stream_id) is not None else None
                append_and_fold(connection, batches, metadata, loaded=loaded, store=store)
                return decided
        except ConcurrencyConflict as conflict:
            if attempt == CONFLICT_RETRIES - 1:
                # The store's message names the stream: kept as the cause, for the log only.
                raise ConcurrencyConflict() from conflict
            _back_off(attempt)
    raise AssertionError("unreachable")


@frozen
class Folded:
    """One stream as a decision reads it."""

    state: Any  # the live part and what the call looked up, when the stream has a snapshot; else its whole fold
    version: int
    snapshot: Snapshot | None  # the snapshot folded from, if the stream has one: what the append evolves
    counts: Sequence[Mapping[str, Any]] = ()  # its counts not yet written, as read (``infra.services.counts``)


def _load_folded(
    store: PostgresEventStore, folds: Mapping[str, Callable[[Iterable[object]], Any]],
    lookups: Mapping[str, Lookups] | None = None,
) -> dict[str, Folded]:
    """Each stream folded: from its snapshot and the events after it, or from every event.

    One statement when every stream is snapshotted and its snapshot current,
    as they are once written through here; a second for the events past a
    snapshot, or for a stream that has none. A snapshotted stream's state is
    its live part with what ``lookups`` names of it.
    """
    snapshotted = [stream_id for stream_id in folds if fold_of(stream_id) is not None]
    decided = load_for_decision(store.connection, snapshotted, store.keyring, lookups) if snapshotted else {}
    after = {stream_id: 0 for stream_id in folds if stream_id not in decided}
    for stream_id, read in decided.items():
        # Only a stream that predates snapshots (or a rebuild) has events after its snapshot: read them only then.
        since = read.snapshot.version if read.snapshot is not None else 0
        if read.last_version > since:
            after[stream_id] = since
    tails = store.load_many(after) if after else {}
    folded = {}
    for stream_id, fold in folds.items():
        if stream_id not in decided:
            history = tails[stream_id]
            folded[stream_id] = Folded(fold(r.event for r in history), history[-1].stream_version if history else 0,
                                       None)
            continue
        read = decided[stream_id]
        snapshot = read.snapshot
        for recorded in tails.get(stream_id, ()):
            snapshot = evolve_snapshot(snapshot, recorded)
        folded[stream_id] = (Folded(fold(()), 0, None, read.counts) if snapshot is None
                             else Folded(with_found(snapshot.state, read.found, read.receipts), snapshot.version,
                                         snapshot, read.counts))
    return folded


def _with_counts(
    connection: Connection, stream_id: str, batches: Batches, folded: Folded, decided: Any, now: datetime,
) -> Batches:
    """Count a counted call; before anything else is appended to the stream, append its counts, unless that
    would take the window past its ceiling of events from floods: then they wait for the window to close."""
    counted = getattr(decided, "counted", None)
    if counted is not None:
        # A counted call appends nothing to its stream (domain.counting): the next append writes its count.
        count_call(connection, stream_id, counted)
        return batches
    appended = [event for stream, _, events in batches if stream == stream_id for event in events]
    if not folded.counts or not appended:
        return batches
    # Written past the ceiling, counts would be a flood's events one by one again: one per event the caller
    # manages to append (a wrong code, a new request). Held back, they are written once, when the window closes.
    if not counts_fit(folded.state.flood, counted_events(folded.counts), appended, now=now):
        return batches
    # Read with the stream, under its lock: no call has been counted since.
    summaries = take_counts(connection, stream_id, folded.counts)
    return [(stream, version, [*summaries, *events] if stream == stream_id else events)
            for stream, version, events in batches]


def write_closed_counts(ctx: ServiceContext, stream_id: str, metadata: Mapping[str, Any] | None = None) -> int:
    """Append the stream's counts of windows that have closed, as ``RequestsCounted``, under its lock; how many.

    Its next append would write them first anyway, unless their window
    reached its ceiling (``domain.counting.counts_fit``). Written once their
    hour is over, a flood reaches the log (and reviewers) whatever its victim does
    next, and the victim's next request does not pay for writing it
    (``infra.services.closed_counts``). A window still open keeps counting:
    written now, its count would take an event per pass instead of one.
    """
    fold = fold_of(stream_id)
    if fold is None:  # only the reset and OTP streams count calls, and a decision reads counts with a snapshot
        return 0
    with pipelined_transaction(ctx.engine) as connection:
        lock_stream(connection, stream_id)
        store = PostgresEventStore(connection)
        folded = _load_folded(store, {stream_id: fold})[stream_id]
        summaries = take_counts(connection, stream_id, folded.counts, closed_by=ctx.clock.now())
        if summaries:
            append_and_fold(connection, [(stream_id, folded.version, summaries)], metadata,
                            loaded={SNAPSHOTS.name: {stream_id: folded.snapshot}}, store=store)
        return len(summaries)


def _back_off(attempt: int) -> None:
    """Sleep a random time up to an exponentially growing bound, so that racing writers spread out."""
    time.sleep(random.uniform(0, FIRST_BACKOFF_SECONDS * 2**attempt))


def load_state(
    ctx: ServiceContext, stream_id: str, fold: Callable[[Iterable[object]], Any], connection: Connection | None = None,
    lookups: Lookups = NO_LOOKUPS,
) -> Any:
    """One stream's state as a decision reads it (a snapshotted stream's live part, and what ``lookups``
    names), on ``connection`` or a fresh one."""
    return load_states(ctx, {stream_id: fold}, connection, {stream_id: lookups})[stream_id]


def load_states(
    ctx: ServiceContext, folds: Mapping[str, Callable[[Iterable[object]], Any]], connection: Connection | None = None,
    lookups: Mapping[str, Lookups] | None = None,
) -> dict[str, Any]:
    """The state of each stream in ``folds`` as a decision reads it (a snapshotted stream's live part, and
    what ``lookups`` names of it): in one statement whatever the streams' lengths, on ``connection`` or a
    fresh one."""
    if connection is not None:
        loaded = _load_folded(PostgresEventStore(connection), folds, lookups)
    else:
        with ctx.engine.connect() as fresh:
            loaded = _load_folded(PostgresEventStore(fresh), folds, lookups)
    return {stream_id: folded.state for stream_id, folded in loaded.items()}
