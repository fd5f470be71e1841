"""The registry: every read model is registered, and an inline projection's declared events are all it folds."""

from __future__ import annotations

import typing

import attrs
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from domain.errors import UnknownEventType
from domain.otp_state import fold_otp
from domain.reset_state import fold_reset
from infra.eventlog.tags import EVENT_TYPES
from infra.projector.inline import INLINE
from infra.projector.appliers import KeyedApplier
from infra.projector.snapshots import SnapshotApplier
from infra.projector.registry import all_projections, catch_up_projections

FILTERED = [p for p in all_projections() if p.event_types is not None]


def instances_of(cls: type) -> st.SearchStrategy[object]:
    """Any instance of an event class (its annotations are strings: resolve them first)."""
    hints = typing.get_type_hints(cls)
    return st.builds(cls, **{field.name: st.from_type(hints[field.name]) for field in attrs.fields(cls)})


def test_every_inline_projection_and_both_catch_up_ones_are_registered() -> None:
    names = [p.name for p in all_projections()]
    assert names == [p.name for p in INLINE] + ["delivery_stats", "audit_index"]
    assert {p.kind for p in catch_up_projections()} == {"catch-up"}
    assert all(p.description for p in all_projections()), "each describes itself in one line"


def test_every_known_inline_projection_declares_the_events_it_folds() -> None:
    assert {p.name for p in FILTERED} == {p.name for p in all_projections() if p.kind == "inline"}
    for projection in FILTERED:
        assert projection.event_types <= set(EVENT_TYPES), projection.name


@pytest.mark.parametrize("tag", sorted(EVENT_TYPES))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_no_undeclared_event_ever_touches_a_filtered_projection(tag: str, data: st.DataObject) -> None:
    event = data.draw(instances_of(EVENT_TYPES[tag][0]))
    for projection in FILTERED:
        if tag in projection.event_types:
            continue
        applier = projection.applier
        if isinstance(applier, SnapshotApplier):  # keyed by stream: the folds refuse what it does not declare
            for fold in (fold_reset, fold_otp):
                with pytest.raises(UnknownEventType):
                    fold([event])
            continue
        assert isinstance(applier, KeyedApplier)
        assert applier.key_of(event) is None, f"{projection.name} folds {tag} but does not declare it"


STARTING = [(applier, cls) for applier in INLINE if isinstance(applier, KeyedApplier) for cls in applier.starts]


def rows_of(row_type: type) -> st.SearchStrategy[object]:
    hints = typing.get_type_hints(row_type)
    return st.builds(row_type, **{field.name: st.from_type(hints[field.name]) for field in attrs.fields(row_type)})


@pytest.mark.parametrize(("applier", "cls"), STARTING, ids=[f"{a.name}-{c.__name__}" for a, c in STARTING])
@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_an_event_that_starts_a_row_makes_the_same_row_whatever_row_was_there(
    applier: KeyedApplier, cls: type, data: st.DataObject
) -> None:
    # What lets the inline fold skip reading these rows: the row it would have read cannot matter.
    event = data.draw(instances_of(cls))
    assume(applier.key_of(event) is not None)  # an event the projection does not key never reaches evolve
    before = data.draw(rows_of(applier.row_type))
    assert applier.evolve(before, event) == applier.evolve(None, event)


def test_the_outbox_reset_tokens_challenges_and_receipts_are_started_by_the_events_that_create_their_ids() -> None:
    started = {applier.name: {cls.__name__ for cls in applier.starts} for applier, _ in STARTING}
    assert started == {
        "email_outbox": {"EmailQueued", "WebhookQueued"},  # a webhook delivery is an outbox row too
        "webhook_endpoints": {"WebhookEndpointAdded"},
        "reset_tokens": {"ResetRequested"},
        "otp_challenges": {"OtpChallengeIssued"},
        "receipts": {"ResetRequested", "OtpChallengeIssued", "IdempotencyKeyBound"},
    }
