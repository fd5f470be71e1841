"""The ``stream_snapshots`` read model: each reset and OTP stream folded, and the version it is folded to.

Why snapshots and not a fold window: the rules reach back further than any
window one could name without changing an answer. A consumed link is told
"already used" a year on, an idempotency key replays for 24 hours, and the
OTP account lock counts wrong codes across challenges for good. A snapshot
keeps exactly the state the fold would give, so a decision folds it plus
the events after its version, whatever the stream's length; the log, replay
and history still see every event, and ``projections verify`` checks each
snapshot against a fold of its whole stream.

A snapshot holds no address and no nonce. Each request keeps, instead of its
recipient and nonce, the log position of the event that carries them
(``recipient_at``); the reader opens that event's envelopes under the user's
data key, so `privacy forget` erases them from snapshots as it erases them
in the log.

The state's size grows with the requests a user made (at most the hourly
limit an hour), not with calls: refusals and repeats are counted
(``domain.counting.RequestsCounted``) and change nothing here but the run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any
from uuid import UUID

from attrs import evolve, frozen

from domain.log import RecordedEvent
from domain.otp_events import OtpChallengeIssued, otp_stream
from domain.otp_state import OtpState, fold_otp
from domain.reset_events import ResetRequested, reset_stream
from domain.reset_state import ResetState, fold_reset

State = ResetState | OtpState
# stream id prefix -> the flow's fold; the prefixes come from the stream-naming functions themselves.
FOLDS: dict[str, Callable[[Iterable[object], Any], Any]] = {
    reset_stream(""): fold_reset,
    otp_stream(""): fold_otp,
}


def fold_of(stream_id: str) -> Callable[[Iterable[object], Any], Any] | None:
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


def snapshot_key(recorded: RecordedEvent) -> str | None:
    """Which row an event touches: its stream's, when the stream is snapshotted."""
    return recorded.stream_id if fold_of(recorded.stream_id) is not None else None


def evolve_snapshot(snapshot: Snapshot | None, recorded: RecordedEvent) -> Snapshot:
    """The snapshot once ``recorded`` is folded into it (the first event of a stream starts one)."""
    fold = fold_of(recorded.stream_id)
    assert fold is not None, f"{recorded.stream_id} has no snapshots"
    state = fold([recorded.event], snapshot.state if snapshot is not None else None)
    recipient_at = snapshot.recipient_at if snapshot is not None else {}
    event = recorded.event
    if isinstance(event, ResetRequested):
        recipient_at = {**recipient_at, event.request_id: recorded.global_position}
    elif isinstance(event, OtpChallengeIssued):
        recipient_at = {**recipient_at, event.challenge_id: recorded.global_position}
    if snapshot is None:
        return Snapshot(recorded.stream_id, recorded.stream_version, state, recipient_at)
    return evolve(snapshot, version=recorded.stream_version, state=state, recipient_at=recipient_at)
