"""Every projection of authledger: its name, tables, pure fold, and how it keeps up.

- ``inline`` projections are folded in the transaction that appends their
  events (``infra.inline_projections.INLINE``): they can never lag.
- ``catch-up`` projections follow the log by the transaction-id horizon
  (``infra.catchup``) and store their checkpoint in ``projection_checkpoints``
  in the same transaction as their rows.

Rebuild, verify, replay, status and the test suite's replay check all work
from this one list, so a projection added to ``INLINE`` is covered by them
the day it is added.
"""

from __future__ import annotations

import sys

from attrs import frozen
from sqlalchemy import Table

from domain.errors import NotFound
from infra import tables
from infra.inline_projections import INLINE, InlineProjection
from infra.projection_appliers import Applier, EntriesApplier, KeyedApplier
from projections.audit_index import entries_of
from projections.delivery_stats import DeliveryRow, delivery_key, evolve_delivery

INLINE_KIND = "inline"
CATCH_UP_KIND = "catch-up"


@frozen
class Projection:
    name: str
    kind: str  # "inline" or "catch-up"
    description: str
    applier: Applier  # folding into the live tables

    @property
    def tables(self) -> tuple[Table, ...]:
        return self.applier.tables

    @property
    def catches_up(self) -> bool:
        return self.kind == CATCH_UP_KIND


def _summary_of(module_name: str) -> str:
    """The first line of the fold's module docstring: each projection describes itself once."""
    doc = getattr(sys.modules.get(module_name), "__doc__", None) or ""
    return doc.strip().splitlines()[0].replace("``", "") if doc.strip() else ""


def _inline(projection: InlineProjection) -> Projection:
    applier = KeyedApplier(projection.table, projection.row_type, projection.key_column, projection.key_of,
                           projection.evolve)
    return Projection(projection.name, INLINE_KIND, _summary_of(projection.evolve.__module__), applier)


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
