"""The ``stream_snapshots`` read model: each reset and OTP stream's live part, and a row per request.

Why snapshots and not a fold window: the rules reach back further than any
window one could name without changing an answer. A consumed link is told
"already used" a year on, an idempotency key replays for 24 hours, and the
OTP account lock counts wrong codes across challenges for good. A snapshot
keeps the part of the fold every decision reads, and each request a row
that a decision finds by key, so a decision folds them plus the events
after the snapshot's version, whatever the stream's length; the log, replay
and history still see every event, and ``projections verify`` checks both
tables against a fold of the whole stream.

A snapshot holds no address and no nonce. Each request keeps, instead of its
recipient and nonce, the log position of the event that carries them
(``recipient_at``); the reader opens that event's envelopes under the user's
data key, so `privacy forget` erases them from snapshots as it erases them
in the log.

A snapshot holds a stream's live part only (``live_part``): its open
requests, when each request within ``LIVE_FOR`` of the newest was made (what
the hourly limit counts), the run and the account counters, and no receipt.
Every request, open or closed, also has a row of its own (a step's
``unwritten`` says which to write), so that a decision finds a closed one by
the key its call carries (a link's token, a code's challenge, an idempotency
key's receipt, a queued email's request) and adds it to the live part
(``with_found``). A snapshot's size therefore follows neither the user's
history nor the hourly limit's requests: a user kept at the limit for two
days made a decision read 235 requests before (bench/RESULTS.md, "Two days
at the hourly limit"), and one with the last two hours' requests kept each
of them, its address opened, until only the open one was (bench/RESULTS.md,
"Closed requests leave the live part").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol
from uuid import UUID

from attrs import evolve, field, frozen

from domain.log import RecordedEvent
from domain.otp_events import OtpChallengeIssued, otp_stream
from domain.otp_state import OtpChallenge, OtpState, fold_otp
from domain.request_rules import RATE_WINDOW, Receipt
from domain.reset_events import ResetRequested, reset_stream
from domain.reset_state import ResetRequest, ResetState, fold_reset

State = ResetState | OtpState
Request = ResetRequest | OtpChallenge
# What a decision iterates over, rather than looks up by key, is the open requests (superseded by a new one) and
# the times of those inside the rate window (counted by the hourly limit). The times are kept for twice the
# window, so that a process whose clock lags the one that wrote the newest request still counts every request
# its window holds.
LIVE_FOR = 2 * RATE_WINDOW
# stream id prefix -> the flow's fold; the prefixes come from the stream-naming functions themselves.
class Fold(Protocol):
    """``fold_reset`` and ``fold_otp``: every event from the start, or those after a snapshot's state."""

    def __call__(self, events: Iterable[object], state: Any = None, /) -> Any: ...


FOLDS: dict[str, Fold] = {
    reset_stream(""): fold_reset,
    otp_stream(""): fold_otp,
}


def fold_of(stream_id: str) -> Fold | None:
    """The fold of a snapshotted stream, or None for a stream without snapshots."""
    for prefix, fold in FOLDS.items():
        if stream_id.startswith(prefix):
            return fold
    return None


@frozen
class Snapshot:
    """A stream's state at ``version``, with where each request's recipient is stored in the log."""

    stream_id: str
    version: int
    state: State
    # request or challenge id -> global position of the event that carries its recipient
    recipient_at: Mapping[UUID, int]
    # The request rows its steps made or changed since it was read (with the recipient's position), not yet
    # written: the applier writes them with the snapshot. Not part of its value.
    unwritten: Mapping[UUID, tuple[Request, int]] = field(factory=dict, eq=False, repr=False)


def snapshot_key(recorded: RecordedEvent) -> str | None:
    """Which row an event touches: its stream's, when the stream is snapshotted."""
    return recorded.stream_id if fold_of(recorded.stream_id) is not None else None


def evolve_snapshot(snapshot: Snapshot | None, recorded: RecordedEvent) -> Snapshot:
    """The snapshot once ``recorded`` is folded into it (the first event of a stream starts one), cut to its
    live part."""
    fold = fold_of(recorded.stream_id)
    assert fold is not None, f"{recorded.stream_id} has no snapshots"
    folded = fold([recorded.event], snapshot.state if snapshot is not None else None)
    recipient_at = snapshot.recipient_at if snapshot is not None else {}
    event = recorded.event
    if isinstance(event, ResetRequested):
        recipient_at = {**recipient_at, event.request_id: recorded.global_position}
    elif isinstance(event, OtpChallengeIssued):
        recipient_at = {**recipient_at, event.challenge_id: recorded.global_position}
    # Compared before the cut: a request this step closes leaves the live part in the same step, and its row
    # must say so.
    unwritten = {**(snapshot.unwritten if snapshot is not None else {}),
                 **_changed(requests_of(snapshot.state) if snapshot is not None else {}, folded, recipient_at)}
    state = live_part(folded)
    live = requests_of(state)
    if len(recipient_at) != len(live):
        recipient_at = {request_id: at for request_id, at in recipient_at.items() if request_id in live}
    return Snapshot(recorded.stream_id, recorded.stream_version, state, recipient_at, unwritten)


def requests_of(state: State) -> Mapping[UUID, Request]:
    """A state's requests (reset) or challenges (OTP), by id."""
    return state.requests if isinstance(state, ResetState) else state.challenges


def live_part(state: State) -> State:
    """The state a snapshot keeps: the open requests, the times of those made within ``LIVE_FOR`` of the
    newest, and the counters; no closed request and no receipt.

    Whatever a decision reads beyond that, it reads by key, and finds in the
    stream's request rows and the receipts (``with_found``).
    """
    requests = requests_of(state)
    live = {request_id: r for request_id, r in requests.items() if r.status == "open"}
    times = state.request_times
    if times:
        oldest_live = max(times) - LIVE_FOR
        times = tuple(t for t in times if t >= oldest_live)
    if len(live) == len(requests) and len(times) == len(state.request_times) and not state.receipts:
        return state
    if isinstance(state, ResetState):
        by_token_hash = {token_hash: i for token_hash, i in state.by_token_hash.items() if i in live}
        requests_kept = {i: r for i, r in state.requests.items() if i in live}  # typed as the state's own
        return evolve(state, requests=requests_kept, by_token_hash=by_token_hash, receipts={}, request_times=times)
    challenges_kept = {i: c for i, c in state.challenges.items() if i in live}
    return evolve(state, challenges=challenges_kept, receipts={}, request_times=times)


def with_found(
    state: State, found: Iterable[Request], receipts: Mapping[tuple[str | None, str], Receipt] | None = None,
) -> State:
    """A live part with the older requests and the receipts a decision looked up by key: the state it decides on.

    Equal, for that decision, to the whole fold: what it iterates is live,
    and what it looks up is found (tests/services/test_snapshots_equal_the_fold.py).
    """
    found = [r for r in found if request_id_of(r) not in requests_of(state)]
    receipts = receipts or {}
    if not found and not receipts:
        return state
    if isinstance(state, ResetState):
        added = {r.request_id: r for r in found if isinstance(r, ResetRequest)}
        return evolve(state, requests={**added, **state.requests},
                      by_token_hash={**state.by_token_hash, **{r.token_hash: i for i, r in added.items()}},
                      receipts={**state.receipts, **receipts})
    challenges = {r.challenge_id: r for r in found if isinstance(r, OtpChallenge)}
    return evolve(state, challenges={**challenges, **state.challenges}, receipts={**state.receipts, **receipts})


def request_id_of(request: Request) -> UUID:
    """A request's or challenge's id."""
    return request.request_id if isinstance(request, ResetRequest) else request.challenge_id


def _changed(
    before: Mapping[UUID, Request], after: State, recipient_at: Mapping[UUID, int],
) -> dict[UUID, tuple[Request, int]]:
    """The requests ``after`` (a step's fold, before its cut) made or changed, each with its recipient's log
    position: request rows to write. A request of ``before`` it does not hold was cut from the live part
    earlier: its row already holds it."""
    return {request_id: (request, recipient_at[request_id])
            for request_id, request in requests_of(after).items() if before.get(request_id) != request}
