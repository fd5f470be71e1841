"""One user's OTP stream folded: ``OtpState``, each challenge's facts, the account-lock counters.

A pure fold: ``evolve_otp`` takes one event, ``fold_otp`` many, from the
start or from a snapshot. ``domain.otp`` decides over what it returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
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
from domain.otp_events import (
    OtpChallengeInvalidated,
    OtpChallengeIssued,
    OtpChallengeLockedOut,
    OtpChallengeSuperseded,
    OtpChallengeVerified,
    OtpCodeRejected,
    OtpRequestRefused,
    OtpVerificationFailed,
)


@frozen
class OtpChallenge:
    """One challenge's facts and where it stands: "open", "superseded",
    "invalidated" (by support), "verified" or "locked"."""

    challenge_id: UUID
    user_id: str
    recipient: str
    key_id: str
    digits: int
    purpose: str
    issued_at: datetime
    expires_at: datetime
    message_id: UUID
    idempotency_key: str | None
    client: str | None
    status: str = "open"
    failures: int = 0
    derivation: int = 1
    nonce: str | None = field(default=None, repr=False)
    locale: str | None = None  # the language asked for, which the email is rendered in the best match of

    def past(self) -> PastRequest:
        """This challenge as the shared request rules see it."""
        outcome = RequestOutcome(self.challenge_id, self.message_id, self.expires_at, reused=False)
        params = (self.recipient, self.purpose)
        return PastRequest(outcome, self.issued_at, params, self.status == "open")


@frozen
class OtpState:
    """Everything the OTP rules need from one user's stream."""

    challenges: Mapping[UUID, OtpChallenge]  # in issue order
    # (client, idempotency_key) -> the challenge it last created or was bound to.
    receipts: Mapping[tuple[str | None, str], Receipt]
    consecutive_failures: int
    account_lockouts: int
    locked_until: datetime | None
    # The run of alike answers (refusals, bound repeats) the last events belong to: floods are counted.
    run: CountingRun | None = None
    # Rejected presentations written in the latest window they were written in: past a bound they are counted.
    rejections: CountingRun | None = None
    # When each challenge was issued, oldest first: what the hourly limit counts. Apart from ``challenges`` so
    # that a snapshot keeps the open challenges and the times alone (``projections.snapshots.live_part``).
    request_times: tuple[datetime, ...] = ()
    # The events floods wrote (refusals, bindings, rejections, counts) in the latest window they wrote any:
    # past the ceiling every such call is counted, whatever it varies.
    flood: FloodTally | None = None


def initial_otp_state() -> OtpState:
    """The state of a stream with no events."""
    return OtpState(
        challenges={}, receipts={}, consecutive_failures=0, account_lockouts=0, locked_until=None
    )


def _with_challenge(state: OtpState, challenge: OtpChallenge) -> OtpState:
    return evolve(state, challenges={**state.challenges, challenge.challenge_id: challenge})


def evolve_otp(state: OtpState, event: object) -> OtpState:
    """The state after ``event``. Events about unknown challenges change the
    challenge map not at all, so a replay never fails half-way."""
    flood = flood_after(state.flood, event)
    if flood != state.flood:
        state = evolve(state, flood=flood)
    if isinstance(event, OtpCodeRejected):
        # Neither ends nor extends a run of refusals: presentations are bounded on their own.
        return evolve(state, rejections=rejections_after(state.rejections, event.rejected_at))
    run = run_after(state.run, event, OtpRequestRefused)
    if run != state.run:
        state = evolve(state, run=run)
    return _evolve_challenges(state, event)


def _evolve_challenges(state: OtpState, event: object) -> OtpState:
    challenge: OtpChallenge | None  # made by the first branch, looked up by the others
    if isinstance(event, OtpChallengeIssued):
        challenge = OtpChallenge(
            event.challenge_id, event.user_id, event.recipient, event.key_id, event.digits,
            event.purpose, event.issued_at, event.expires_at, event.message_id, event.idempotency_key,
            event.client, derivation=event.derivation, nonce=event.nonce, locale=event.locale,
        )  # fmt: skip
        state = evolve(_with_challenge(state, challenge), request_times=(*state.request_times, event.issued_at))
        if event.idempotency_key is not None:
            receipt = Receipt(event.challenge_id, event.issued_at)
            state = _with_receipt(state, event.client, event.idempotency_key, receipt)
        return state
    if isinstance(event, IdempotencyKeyBound):
        receipt = Receipt(event.request_id, event.bound_at)
        return _with_receipt(state, event.client, event.idempotency_key, receipt)
    if isinstance(event, OtpVerificationFailed):
        state = evolve(state, consecutive_failures=event.consecutive_failures)
        challenge = state.challenges.get(event.challenge_id)
        if challenge is None:
            return state
        return _with_challenge(state, evolve(challenge, failures=event.attempt))
    if isinstance(event, OtpChallengeVerified):
        state = evolve(state, consecutive_failures=0)
        return _set_status(state, event.challenge_id, "verified")
    if isinstance(event, OtpChallengeSuperseded):
        return _set_status(state, event.challenge_id, "superseded")
    if isinstance(event, OtpChallengeInvalidated):
        return _set_status(state, event.challenge_id, "invalidated")
    if isinstance(event, OtpChallengeLockedOut):
        if event.scope == "challenge":
            return _set_status(state, event.challenge_id, "locked")
        # An account lockout without an end would be for good.
        until = event.until or datetime.max.replace(tzinfo=UTC)
        return evolve(state, account_lockouts=state.account_lockouts + 1, locked_until=until)
    if isinstance(event, (OtpRequestRefused, RequestsCounted)):
        return state
    raise UnknownEventType(f"{type(event).__name__} is not an event of an OTP stream")


def _with_receipt(state: OtpState, client: str | None, key: str, receipt: Receipt) -> OtpState:
    return evolve(state, receipts={**state.receipts, (client, key): receipt})


def _set_status(state: OtpState, challenge_id: UUID | None, status: str) -> OtpState:
    challenge = state.challenges.get(challenge_id) if challenge_id is not None else None
    if challenge is None or challenge.status != "open":
        return state
    return _with_challenge(state, evolve(challenge, status=status))


def open_challenges(state: OtpState) -> list[OtpChallenge]:
    return [c for c in state.challenges.values() if c.status == "open"]


def receipt_request(state: OtpState, client: str | None, key: str | None) -> PastRequest | None:
    receipt = state.receipts.get((client, key)) if key is not None else None
    challenge = state.challenges.get(receipt.request_id) if receipt is not None else None
    if receipt is None or challenge is None:
        return None
    return first_answer(receipt, challenge.past(),
                        created_with_key=(challenge.client, challenge.idempotency_key) == (client, key))


def fold_otp(events: Iterable[object], state: OtpState | None = None) -> OtpState:
    """The state after all ``events``, oldest first, from ``state`` (a snapshot) or the start."""
    state = state if state is not None else initial_otp_state()
    for event in events:
        state = evolve_otp(state, event)
    return state


def account_locked_until(state: OtpState, *, now: datetime) -> datetime | None:
    """When the account's OTP lockout ends, or None when it is not locked."""
    if state.locked_until is not None and now < state.locked_until:
        return state.locked_until
    return None
