"""The one answer to "what happened to this user, request or message": the events about it, in log order.

``history``, ``explain`` and ``GET /v1/timeline`` all ask this module, so
the CLI and the API cannot disagree about which events concern what.

Where the events are found: ``audit_index`` (a catch-up projection) up to
its checkpoint, and the log itself past the checkpoint, matched with the
same pure ``entries_of`` that fills the index. Everything is read in one
repeatable-read snapshot, so the index and the log agree. This is why the
HTTP timeline, though it now reads a catch-up index, is never stale: what
the index has not reached yet is read from the log, and the answer is the
same as if the index were current. The price is a read of the unindexed
tail on each look-up; ``authledger serve`` keeps the index caught up, so
the tail is short, and ``unindexed`` says how long it was. Read through the
replica's engine (``AUTHLEDGER_READ_DATABASE_URL``), ``replica`` says how far
behind the primary that snapshot was.

What "about" means, one definition each:

- a user: their reset and OTP streams, the streams of the emails those
  name, and their erasure (optionally one flow only);
- a request (reset request or OTP challenge): its own events, those of every
  email it queued, and the same for the request that replaced it, which is
  what tells why its link or code stopped working;
- a message: the events of that one email and of the request it served
  (which say why it was, or was not, sent).

Reviewers read addresses in plain text: the events a ``Lookup`` returns,
and the stored payloads it shows, have their addresses opened with the
user's data key, or ``[erased]`` once ``privacy forget`` destroyed it;
never an ``enc:v1:`` envelope. Any other personal field (a secret sealed
under the same key) reads ``[withheld]``: a reviewer has no use for it.
This needs the master key, as every command that opens personal data does.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from uuid import UUID

from attrs import frozen
from sqlalchemy import Connection, Engine, text

from domain.email import EmailQueued
from domain.log import RecordedEvent
from domain.otp_events import OtpChallengeSuperseded
from domain.privacy import subject_stream
from domain.reset_events import ResetSuperseded
from domain.tenants import DEFAULT_TENANT, tenant_of
from infra.db.replica import replica_lag
from infra.errors import PersonalDataUnreadable
from infra.eventlog.codec import default_codec
from infra.eventlog.personal_data import FieldContext
from infra.eventlog.reader import AT_POSITIONS, COMMITTED, pages
from infra.eventlog.subject_keys import PostgresKeyring
from infra.projector.catchup import read_checkpoint
from projections.audit_index import MESSAGE_FIELDS, entries_of, user_of_stream
from projections.timeline import timeline

INDEXED = text("SELECT global_position FROM audit_index WHERE kind = :kind AND value = ANY(:values)")
# What a reviewer reads in plain text: the addresses. Anything else sealed
# under a user's key is withheld from them.
READ_BY_REVIEWERS = frozenset({"recipient", "diagnostic"})  # a bounce's diagnostic often repeats it
WITHHELD = "[withheld]"


class ReviewerKeyring:
    """Opens the addresses a reviewer reads (``[erased]`` once the key is gone) and withholds other personal fields."""

    def __init__(self, keys: PostgresKeyring) -> None:
        self.keys = keys

    def seal(self, context: FieldContext, plaintext: str) -> str:
        raise PersonalDataUnreadable("a review never writes personal data")

    def open(self, context: FieldContext, envelope: str) -> str:
        return self.keys.open(context, envelope) if context.field in READ_BY_REVIEWERS else WITHHELD


class Lookup:
    """Events naming a user, request or message: the index, plus the log after its checkpoint."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        # First, so that the snapshot the answer is read from is the one measured (infra.db.replica).
        self.replica = replica_lag(connection)
        self.keys = PostgresKeyring(connection)
        self.keyring = ReviewerKeyring(self.keys)
        stored = read_checkpoint(connection, "audit_index")
        self.tail = [r for page in pages(connection, stored.checkpoint, COMMITTED) for r in page]

    @property
    def unindexed(self) -> int:
        """How far ``audit_index`` lagged: the events read from the log instead."""
        return len(self.tail)

    def find(self, kind: str, values: Iterable[str], *, tenant: str | None = None) -> list[RecordedEvent]:
        """The events that name any of ``values`` as a ``kind`` ("user", "request", "message"), in log order.

        With ``tenant``, events of another tenant's user are not found, and
        finding that out sends the very statements an id that nobody knows
        does (the index, the rows at no position, no key): neither the answer
        nor its time tells another tenant's id from an unknown one.
        """
        values = sorted(set(values))
        if not values:
            return []
        positions = list(self.connection.execute(INDEXED, {"kind": kind, "values": values}).scalars())
        positions += [r.global_position for r in self.tail
                      if any(e.kind == kind and e.value in values for e in entries_of(r))]
        # Read even when no position was found, so that an unknown id costs what another tenant's does.
        rows = self.connection.execute(AT_POSITIONS, {"positions": sorted(set(positions))}).all()
        if tenant is not None and _tenant_of_rows(rows) != tenant:
            rows = []
        codec = default_codec()
        return [codec.decode_row(row, self.keyring) for row in self._with_keys(rows)]

    def stored(self, events: list[RecordedEvent]) -> list[Any]:
        """The rows of these events exactly as stored (payload and metadata undecoded), in log order.

        Show a row's payload through ``payload``, never as stored: it holds envelopes.
        """
        return self.stored_rows([r.global_position for r in events])

    def payload(self, row: Any) -> dict[str, Any]:
        """A stored row's payload as a reviewer reads it: addresses opened or ``[erased]``, never an envelope."""
        return default_codec().open_personal(row.event_type, row.payload, self.keyring)

    def stored_rows(self, positions: list[int]) -> list[Any]:
        """The rows at ``positions`` exactly as stored, in log order, with the keys their addresses need loaded."""
        rows = self.connection.execute(AT_POSITIONS, {"positions": sorted(set(positions))}).all() if positions else []
        return self._with_keys(rows)

    def _with_keys(self, rows: Sequence[Any]) -> list[Any]:
        self.keys.prefetch((row.event_type, row.payload) for row in rows)
        return sorted(rows, key=lambda row: row.global_position)


def _tenant_of_rows(rows: Sequence[Any]) -> str:
    """The tenant whose user the stored ``rows`` are about: named by a user stream, by an email's ``user_id``,
    or by a webhook delivery's ``tenant`` (the default tenant when none names one, as ``of_tenant`` takes it)."""
    for row in rows:
        owner = user_of_stream(row.stream_id) or row.payload.get("user_id")
        if isinstance(owner, str):
            return tenant_of(owner)
        if row.event_type == "WebhookQueued":  # a webhook delivery names its tenant, not a user
            return str(row.payload["tenant"])
    return DEFAULT_TENANT


@contextmanager
def looking_up(engine: Engine) -> Iterator[Lookup]:
    """A ``Lookup`` over one repeatable-read snapshot, for every question of one answer."""
    with engine.connect().execution_options(isolation_level="REPEATABLE READ") as connection:
        yield Lookup(connection)


@frozen
class Story:
    """The events about one request or message, and the user and flow they belong to."""

    user_id: str | None
    request_id: UUID | None
    context: list[RecordedEvent]  # every event of that user and flow: what the sentences are told from
    events: list[RecordedEvent]  # the events about the request or message, in log order


def _in_log_order(events: Iterable[RecordedEvent]) -> list[RecordedEvent]:
    return sorted({r.global_position: r for r in events}.values(), key=lambda r: r.global_position)


def flows_of(events: list[RecordedEvent]) -> dict[str, str]:
    """Stream id -> "reset" or "otp", for user streams and the email streams they queued."""
    flows = {r.stream_id: r.stream_id.split("-user:")[0] for r in events if user_of_stream(r.stream_id)}
    flows.update({r.stream_id: r.event.flow for r in events if isinstance(r.event, EmailQueued)})
    return flows


def about_user(lookup: Lookup, user_id: str, flow: str | None = None) -> list[RecordedEvent]:
    """The user's own streams, the email streams of the messages they queued, and their erasure.

    An erasure is about the user, not one flow: it goes with the events of whichever flow is asked for.
    """
    subject = subject_stream(user_id)
    named = [r for r in lookup.find("user", [user_id])
             if user_of_stream(r.stream_id) == user_id or r.stream_id.startswith("email:") or r.stream_id == subject]
    messages = {str(getattr(r.event, f)) for r in named for f in MESSAGE_FIELDS if getattr(r.event, f, None)}
    events = _in_log_order(named + lookup.find("message", messages))
    if flow is None:
        return events
    flows = flows_of(events)
    in_flow = {r.global_position for r in events if flows.get(r.stream_id) == flow}
    return [r for r in events if r.global_position in in_flow or r.stream_id == subject] if in_flow else []


def _context(lookup: Lookup, hits: list[RecordedEvent]) -> tuple[str | None, list[RecordedEvent]]:
    """The user that ``hits`` belong to, and every event of that user in their flow."""
    queued = next((r.event for r in hits if isinstance(r.event, EmailQueued)), None)
    owner = next((user_of_stream(r.stream_id) for r in hits if user_of_stream(r.stream_id)), None)
    user_id = owner or (queued.user_id if queued else None)
    flow = next(iter(flows_of(hits).values()), None)
    return user_id, (about_user(lookup, user_id, flow) if user_id is not None else hits)


def _request_of_each(context: list[RecordedEvent]) -> dict[int, UUID | None]:
    """Position -> the request an event is about: the one it names, or the one its email serves."""
    return {entry.global_position: entry.request_id for entry in timeline(context)}


def _replacements(context: list[RecordedEvent], request_id: UUID) -> set[UUID]:
    """The request and the one that superseded it."""
    focus = {request_id}
    for r in context:
        if isinstance(r.event, ResetSuperseded | OtpChallengeSuperseded) and r.event.superseded_by is not None:
            superseded = getattr(r.event, "request_id", None) or getattr(r.event, "challenge_id", None)
            if superseded == request_id:
                focus.add(r.event.superseded_by)
    return focus


def about_request(lookup: Lookup, request_id: UUID, tenant: str | None = None) -> Story | None:
    """A request's events and its emails', and those of the request that replaced it; None if unknown (or, with
    ``tenant``, another tenant's: found out as cheaply, see ``Lookup.find``)."""
    hits = lookup.find("request", [str(request_id)], tenant=tenant)
    if not hits:
        return None
    user_id, context = _context(lookup, hits)
    focus, request_of = _replacements(context, request_id), _request_of_each(context)
    return Story(user_id, request_id, context, [r for r in context if request_of[r.global_position] in focus])


def about_message(lookup: Lookup, message_id: UUID, tenant: str | None = None) -> Story | None:
    """One email's events and those of the request it served; None if unknown (or, with ``tenant``, another
    tenant's: found out as cheaply, see ``Lookup.find``)."""
    hits = lookup.find("message", [str(message_id)], tenant=tenant)
    if not hits:
        return None
    user_id, context = _context(lookup, hits)
    served = next((r.event.request_id for r in context
                   if isinstance(r.event, EmailQueued) and r.event.message_id == message_id), None)
    stream, request_of = f"email:{message_id}", _request_of_each(context)
    events = [r for r in context if r.stream_id == stream
              or (served is not None and not r.stream_id.startswith("email:")
                  and request_of[r.global_position] == served)]
    return Story(user_id, served, context, events)


def of_tenant(story: Story | None, tenant: str) -> Story | None:
    """``story`` if its user belongs to ``tenant``, else None: another tenant's request or email does not
    exist for it, so it is answered exactly as an unknown id."""
    if story is None:
        return None
    owner = tenant_of(story.user_id) if story.user_id is not None else DEFAULT_TENANT
    return story if owner == tenant else None
