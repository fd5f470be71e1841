"""Every projection of authledger: its name, tables, pure fold, and how it keeps up.

- ``inline`` projections are folded in the transaction that appends their
  events (``infra.projector.inline.INLINE``): they can never lag.
- ``catch-up`` projections follow the log by the transaction-id horizon
  (``infra.projector.catchup``) and store their checkpoint in ``projection_checkpoints``
  in the same transaction as their rows.

Rebuild, verify, replay, status and the test suite's replay check all work
from this one list, so a projection added to ``INLINE`` is covered by them
the day it is added.
"""

from __future__ import annotations

import sys

from attrs import frozen
from sqlalchemy import Table

from domain import clients, counting, otp_events, privacy, request_rules, reset_events, suppression, tenants
from domain import webhooks
from domain.errors import NotFound
from infra.db import tables
from infra.eventlog.tags import EVENT_TYPES
from infra.projector.inline import EMAIL_EVENTS, INLINE
from infra.eventlog.reader import Reading
from infra.projector.appliers import Applier, EntriesApplier, KeyedApplier
from infra.projector.snapshots import SnapshotApplier
from projections.audit_index import entries_of
from projections.delivery_stats import DeliveryRow, delivery_key, evolve_delivery

INLINE_KIND = "inline"
CATCH_UP_KIND = "catch-up"


# The event classes each inline projection folds, so that a rebuild, verify or
# replay reads and decodes only those: a reset-token rebuild skips the three
# quarters of the log that are email events. A property test
# (tests/projector/test_registry.py) checks, for every other event class,
# that the projection's key_of ignores any instance of it. A projection not
# named here reads every event.
FOLDED_EVENTS: dict[str, tuple[type, ...]] = {
    "email_outbox": EMAIL_EVENTS,
    "reset_tokens": (reset_events.ResetRequested, reset_events.ResetSuperseded, reset_events.ResetCompleted,
                     reset_events.ResetInvalidated),
    "otp_challenges": (otp_events.OtpChallengeIssued, otp_events.OtpChallengeSuperseded,
                       otp_events.OtpChallengeInvalidated,
                       otp_events.OtpVerificationFailed, otp_events.OtpChallengeVerified,
                       otp_events.OtpChallengeLockedOut),
    "receipts": (reset_events.ResetRequested, otp_events.OtpChallengeIssued, request_rules.IdempotencyKeyBound),
    "api_keys": clients.CLIENT_EVENTS,
    "tenants": (tenants.TenantCreated,),
    "tenant_settings": (tenants.TenantConfigured,),
    "webhook_endpoints": webhooks.ENDPOINT_EVENTS,
    "address_index": (reset_events.ResetRequested, otp_events.OtpChallengeIssued, privacy.SubjectErased),
    "suppressions": (suppression.AddressSuppressed, suppression.SuppressionLifted, privacy.SubjectErased),
    # Every event of a reset or OTP stream: the two folds refuse any other (UnknownEventType).
    "stream_snapshots": (reset_events.ResetRequested, reset_events.ResetSuperseded, reset_events.ResetRequestRefused,
                         reset_events.ResetCompleted, reset_events.ResetTokenRejected, reset_events.ResetInvalidated,
                         otp_events.OtpChallengeIssued, otp_events.OtpChallengeSuperseded,
                         otp_events.OtpChallengeInvalidated,
                         otp_events.OtpVerificationFailed, otp_events.OtpChallengeVerified,
                         otp_events.OtpChallengeLockedOut, otp_events.OtpRequestRefused, otp_events.OtpCodeRejected,
                         request_rules.IdempotencyKeyBound, counting.RequestsCounted),
}


# Projections whose fold reads personal fields opened (rebuild, verify and
# replay then need the master key): the address index reads each request's
# sealed address_hmac, which an erased user's events give as "[erased]".
# So does the suppression list, by its sealed hashes.
OPENS_PERSONAL_DATA = frozenset({"address_index", "suppressions"})


def tags_of(classes: tuple[type, ...]) -> frozenset[str]:
    return frozenset(tag for tag, (cls, _) in EVENT_TYPES.items() if cls in classes)


@frozen
class Projection:
    name: str
    kind: str  # "inline" or "catch-up"
    description: str
    applier: Applier  # folding into the live tables
    # The event tags it folds (None: every event). Only inline projections use
    # this to skip events; a catch-up projection's checkpoint counts them all.
    event_types: frozenset[str] | None = None
    personal_data: bool = False  # the fold reads personal fields opened (OPENS_PERSONAL_DATA)

    @property
    def tables(self) -> tuple[Table, ...]:
        return self.applier.tables

    @property
    def catches_up(self) -> bool:
        return self.kind == CATCH_UP_KIND

    @property
    def reading(self) -> Reading:
        """What its fold needs of the log (a catch-up checkpoint counts every event, so reads them all)."""
        return Reading(event_types=None if self.catches_up else self.event_types, details=False,
                       personal_data=self.personal_data)


def _summary_of(module_name: str) -> str:
    """The first line of the fold's module docstring: each projection describes itself once."""
    doc = getattr(sys.modules.get(module_name), "__doc__", None) or ""
    return doc.strip().splitlines()[0].replace("``", "") if doc.strip() else ""


def _inline(applier: KeyedApplier | SnapshotApplier) -> Projection:
    """An inline projection, with the very applier the unit of work folds it with."""
    folded = FOLDED_EVENTS.get(applier.name)
    return Projection(applier.name, INLINE_KIND, _summary_of(applier.evolve.__module__), applier,
                      tags_of(folded) if folded is not None else None, applier.name in OPENS_PERSONAL_DATA)


CATCH_UP: tuple[Projection, ...] = (
    Projection(
        "delivery_stats", CATCH_UP_KIND,
        _summary_of("projections.delivery_stats"),
        KeyedApplier(tables.delivery_messages, DeliveryRow, "message_id", delivery_key, evolve_delivery),
    ),
    Projection(
        "audit_index", CATCH_UP_KIND,
        _summary_of("projections.audit_index"),
        EntriesApplier(tables.audit_index, entries_of),
    ),
)


def all_projections() -> list[Projection]:
    """Inline projections first, in the order they are applied, then the catch-up ones."""
    return [_inline(p) for p in INLINE] + list(CATCH_UP)


def catch_up_projections() -> list[Projection]:
    return list(CATCH_UP)


def projection_named(name: str) -> Projection:
    for projection in all_projections():
        if projection.name == name:
            return projection
    known = ", ".join(p.name for p in all_projections())
    raise NotFound(f"no projection named {name!r}; known projections: {known}")
