"""One user's reset stream folded: ``ResetState``, the facts of each request and where it stands.

A pure fold: ``evolve_reset`` takes one event, ``fold_reset`` many, from the
start or from a snapshot. ``domain.reset`` decides over what it returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from uuid import UUID

from attrs import evolve, field, frozen

from domain.counting import (
    CountingRun,
    FloodTally,
    RequestsCounted,
    flood_after,
    rejections_after,
    run_after,
)
from domain.decisions import RequestOutcome
from domain.request_rules import (
    IdempotencyKeyBound,
    PastRequest,
    Receipt,
    first_answer,
)
from domain.errors import UnknownEventType
from domain.reset_events import (
    ResetCompleted, ResetInvalidated, ResetRequestRefused, ResetRequested, ResetSuperseded, ResetTokenRejected,
)


@frozen
class ResetRequest:
    """One request's facts and where it stands: "open", "superseded", "invalidated" (by support) or "completed"."""

    request_id: UUID
    user_id: str
    recipient: str
    key_id: str
    token_hash: str
    requested_at: datetime
    expires_at: datetime
    message_id: UUID
    idempotency_key: str | None
    client: str | None
    status: str = "open"
    superseded_by: UUID | None = None
    completed_at: datetime | None = None
    derivation: int = 1
    nonce: str | None = field(default=None, repr=False)
    locale: str | None = None  # the language asked for, which the email is rendered in the best match of

    def past(self) -> PastRequest:
        """This request as the shared request rules see it."""
        outcome = RequestOutcome(self.request_id, self.message_id, self.expires_at, reused=False)
        return PastRequest(outcome, self.requested_at, (self.recipient,), self.status == "open")


@frozen
class ResetState:
    """Everything the reset rules need from one user's stream."""

    requests: Mapping[UUID, ResetRequest]  # in request order
    by_token_hash: Mapping[str, UUID]
    # (client, idempotency_key) -> the request it last created or was bound to.
    receipts: Mapping[tuple[str | None, str], Receipt]
    # The run of alike answers (refusals, bound repeats) the last events belong to: floods are counted.
    run: CountingRun | None = None
    # Rejected presentations written in the latest window they were written in: past a bound they are counted.
    rejections: CountingRun | None = None
    # When each request was made, oldest first: what the hourly limit counts. Apart from ``requests`` so that a
    # snapshot keeps the open requests and the times alone (``projections.snapshots.live_part``).
    request_times: tuple[datetime, ...] = ()
    # The events floods wrote (refusals, bindings, rejections, counts) in the latest window they wrote any:
    # past the ceiling every such call is counted, whatever it varies.
    flood: FloodTally | None = None


def initial_reset_state() -> ResetState:
    """The state of a stream with no events."""
    return ResetState(requests={}, by_token_hash={}, receipts={})


def _with_request(state: ResetState, request: ResetRequest) -> ResetState:
    return evolve(state, requests={**state.requests, request.request_id: request})


def evolve_reset(state: ResetState, event: object) -> ResetState:
    """The state after ``event``. Events about unknown requests change nothing,
    so a replay never fails half-way."""
    flood = flood_after(state.flood, event)
    if flood != state.flood:
        state = evolve(state, flood=flood)
    if isinstance(event, ResetTokenRejected):
        # Neither ends nor extends a run of refusals: presentations are bounded on their own.
        return evolve(state, rejections=rejections_after(state.rejections, event.rejected_at))
    run = run_after(state.run, event, ResetRequestRefused)
    if run != state.run:
        state = evolve(state, run=run)
    return _evolve_requests(state, event)


def _evolve_requests(state: ResetState, event: object) -> ResetState:
    request: ResetRequest | None  # made by the first branch, looked up by the others
    if isinstance(event, ResetRequested):
        request = ResetRequest(
            event.request_id, event.user_id, event.recipient, event.key_id, event.token_hash,
            event.requested_at, event.expires_at, event.message_id, event.idempotency_key,
            event.client, derivation=event.derivation, nonce=event.nonce, locale=event.locale,
        )  # fmt: skip
        state = evolve(
            _with_request(state, request),
            by_token_hash={**state.by_token_hash, event.token_hash: event.request_id},
            request_times=(*state.request_times, event.requested_at),
        )
        if event.idempotency_key is not None:
            receipt = Receipt(event.request_id, event.requested_at)
            state = _with_receipt(state, event.client, event.idempotency_key, receipt)
        return state
    if isinstance(event, IdempotencyKeyBound):
        receipt = Receipt(event.request_id, event.bound_at)
        return _with_receipt(state, event.client, event.idempotency_key, receipt)
    if isinstance(event, ResetSuperseded):
        request = state.requests.get(event.request_id)
        if request is None or request.status != "open":
            return state
        return _with_request(
            state, evolve(request, status="superseded", superseded_by=event.superseded_by)
        )
    if isinstance(event, ResetInvalidated):
        request = state.requests.get(event.request_id)
        if request is None or request.status != "open":
            return state
        return _with_request(state, evolve(request, status="invalidated"))
    if isinstance(event, ResetCompleted):
        request = state.requests.get(event.request_id)
        if request is None or request.status != "open":  # only an open request's link can be used
            return state
        return _with_request(
            state, evolve(request, status="completed", completed_at=event.completed_at)
        )
    if isinstance(event, (ResetRequestRefused, RequestsCounted)):
        return state
    raise UnknownEventType(f"{type(event).__name__} is not an event of a reset stream")


def _with_receipt(state: ResetState, client: str | None, key: str, receipt: Receipt) -> ResetState:
    return evolve(state, receipts={**state.receipts, (client, key): receipt})


def fold_reset(events: Iterable[object], state: ResetState | None = None) -> ResetState:
    """The state after all ``events``, oldest first, from ``state`` (a snapshot) or the start."""
    state = state if state is not None else initial_reset_state()
    for event in events:
        state = evolve_reset(state, event)
    return state


def open_requests(state: ResetState) -> list[ResetRequest]:
    return [r for r in state.requests.values() if r.status == "open"]


def receipt_request(state: ResetState, client: str | None, key: str | None) -> PastRequest | None:
    receipt = state.receipts.get((client, key)) if key is not None else None
    request = state.requests.get(receipt.request_id) if receipt is not None else None
    if receipt is None or request is None:
        return None
    return first_answer(receipt, request.past(),
                        created_with_key=(request.client, request.idempotency_key) == (client, key))
