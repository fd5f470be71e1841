"""A provider-wide outage, recognised and ridden out: the circuit breaker of one worker process.

When the provider itself is down, every send fails for the same reason and
retrying message by message only burns attempts. The circuit tells the worker
how many messages it may claim:

- **closed**: the provider answers; claim as many as the window has room for.
  Consecutive provider-down failures (connection failures, timeouts, 5xx)
  across ``failures_to_open`` different messages open it. A message-level
  answer (a 4xx, a rejected address) proves the provider is up and resets
  the count.
- **open**: claim nothing until ``probe_at``; messages already claimed are
  given back without counting an attempt.
- **half-open**: one probe message is in flight. Its success closes the
  circuit; its failure opens it again with the pause doubled, up to
  ``max_pause``.

Pure: the worker passes in the time and the outcome of each send, and
records the transitions these functions return as events.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import Enum
from uuid import UUID

from attrs import evolve, frozen


class Outcome(Enum):
    """What one send says about the provider, not about the message."""

    ANSWERED = "answered"  # accepted, or refused for this message only: the provider is up
    DOWN = "down"  # no answer, or a provider-side error: it may be down


class Transition(Enum):
    OPENED = "opened"  # an outage began: record it, warn
    REOPENED = "reopened"  # a probe failed: the outage goes on
    CLOSED = "closed"  # the provider answers again: record the recovery


@frozen
class CircuitPolicy:
    failures_to_open: int = 5
    # The first pause before a probe, doubled after each failed probe. Kept
    # short so mail flows within seconds of the provider's recovery.
    first_pause: timedelta = timedelta(seconds=1)
    max_pause: timedelta = timedelta(seconds=5)


@frozen
class Circuit:
    state: str = "closed"  # "closed", "open" or "half_open"
    failing: frozenset[UUID] = frozenset()  # different messages failed in a row while closed
    opened_at: datetime | None = None  # when the current outage was recognised
    probe_at: datetime | None = None  # while open: when a probe may go out
    pause: timedelta = timedelta(0)
    last_error: str | None = None


def claim_allowance(circuit: Circuit, *, now: datetime, room: int) -> int:
    """How many messages the worker may claim now, with ``room`` free places in its window."""
    if circuit.state == "closed":
        return room
    if circuit.state == "open" and circuit.probe_at is not None and now >= circuit.probe_at:
        return min(room, 1)
    return 0


def probe_claimed(circuit: Circuit) -> Circuit:
    """The worker claimed its one probe message: wait for its answer before anything else."""
    return evolve(circuit, state="half_open") if circuit.state == "open" else circuit


def observe(
    circuit: Circuit, outcome: Outcome, *, message_id: UUID, now: datetime, error: str | None = None,
    policy: CircuitPolicy = CircuitPolicy(),
) -> tuple[Circuit, Transition | None]:
    """The circuit after one send's outcome, and the transition to record, if any."""
    if circuit.state == "open":
        # A send already in flight when the circuit opened says nothing the
        # probe will not: only the probe's answer closes or reopens it, or the
        # circuit flaps on every late answer of a half-down provider.
        return (evolve(circuit, last_error=error) if outcome is Outcome.DOWN else circuit), None
    if outcome is Outcome.ANSWERED:
        if circuit.state == "closed":
            return (evolve(circuit, failing=frozenset()) if circuit.failing else circuit), None
        return Circuit(), Transition.CLOSED
    if circuit.state == "half_open":
        pause = min(circuit.pause * 2, policy.max_pause)
        return evolve(circuit, state="open", probe_at=now + pause, pause=pause, last_error=error), Transition.REOPENED
    failing = circuit.failing | {message_id}
    if len(failing) < policy.failures_to_open:
        return evolve(circuit, failing=failing, last_error=error), None
    opened = Circuit("open", failing, now, now + policy.first_pause, policy.first_pause, error)
    return opened, Transition.OPENED
