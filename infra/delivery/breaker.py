"""The circuit breaker of one worker process: ``domain/circuit.py`` plus its records and log lines.

Every send outcome is observed. A transition the domain returns is logged
at WARNING right away and kept as an event until ``record`` appends it to
the provider's stream (a database error only delays it).
"""

from __future__ import annotations

import logging
from uuid import UUID

from attrs import evolve

from domain.circuit import Circuit, CircuitPolicy, Outcome, Transition, claim_allowance, observe, probe_claimed
from domain.outage import (
    ProviderOutageBegan,
    ProviderOutageEnded,
    end_of_outage_left_open,
    outage_left_open,
    provider_stream,
)
from infra.delivery.providers import SendFailed
from infra.logs import log_event
from infra.services.unit_of_work import ServiceContext, decide_events_on_stream, record_events

log = logging.getLogger("authledger.delivery")


def outcome_of(error: SendFailed | None) -> Outcome:
    """What a send says about the provider: down only when the provider itself failed, not the message."""
    return Outcome.DOWN if error is not None and getattr(error, "provider_down", False) else Outcome.ANSWERED


class Breaker:
    """How many messages one worker may claim, from what its provider's answers showed."""

    def __init__(
        self, ctx: ServiceContext, provider: str, *, owner: str, policy: CircuitPolicy = CircuitPolicy(),
    ) -> None:
        self.ctx, self.provider, self.owner, self.policy = ctx, provider, owner, policy
        self.circuit = Circuit()
        self.unrecorded: list[object] = []
        # Once this worker's provider has answered a send: whether the log
        # must still be checked for an outage another worker left open.
        self._check_the_log = False
        self._log_checked = False

    @property
    def pending(self) -> bool:
        """Whether ``record`` has something to write (or to check) in the log."""
        return bool(self.unrecorded) or self._check_the_log

    @property
    def state(self) -> str:
        return self.circuit.state

    def allowance(self, room: int) -> int:
        return claim_allowance(self.circuit, now=self.ctx.clock.now(), room=room)

    def probe_claimed(self) -> None:
        """The one message claimed while open is the probe: nothing more until its answer."""
        self.circuit = probe_claimed(self.circuit)

    def probe_not_sent(self) -> None:
        """The probe message turned out unwanted (skipped): the next one may probe at once."""
        if self.circuit.state == "half_open":
            self.circuit = evolve(self.circuit, state="open", probe_at=self.ctx.clock.now())

    def seconds_to_probe(self) -> float | None:
        if self.circuit.state != "open" or self.circuit.probe_at is None:
            return None
        return max((self.circuit.probe_at - self.ctx.clock.now()).total_seconds(), 0.0)

    def observe(self, message_id: UUID, error: SendFailed | None) -> None:
        now, began = self.ctx.clock.now(), self.circuit.opened_at
        if outcome_of(error) is Outcome.ANSWERED and not self._log_checked:
            self._check_the_log = True
        self.circuit, transition = observe(
            self.circuit, outcome_of(error), message_id=message_id, now=now,
            error=error.message if error is not None else None, policy=self.policy,
        )
        if transition is Transition.OPENED:
            event: object = ProviderOutageBegan(
                self.provider, self.owner, now, len(self.circuit.failing), self.circuit.last_error
            )
            log_event(log, "provider outage began", logging.WARNING, provider=self.provider, lease_owner=self.owner,
                      failures=len(self.circuit.failing), error=self.circuit.last_error)
        elif transition is Transition.CLOSED and began is not None:
            event = ProviderOutageEnded(self.provider, self.owner, now, began)
            log_event(log, "provider recovered", logging.WARNING, provider=self.provider, lease_owner=self.owner,
                      down_since=began)
        else:
            if transition is Transition.REOPENED:
                log_event(log, "provider probe failed", provider=self.provider, lease_owner=self.owner,
                          error=self.circuit.last_error, next_probe_at=self.circuit.probe_at)
            return
        self.unrecorded.append(event)

    def record(self) -> None:
        """Append the transitions seen so far to ``provider:<name>``; blocking, run off the event loop.

        After this worker's first answered send, also end an outage the log
        still holds open (``domain.outage.end_of_outage_left_open``).
        """
        if self.unrecorded:
            events = list(self.unrecorded)
            record_events(self.ctx, provider_stream(self.provider), events, {"actor": self.owner})
            del self.unrecorded[: len(events)]
        if self._check_the_log:
            self._check_the_log, self._log_checked = False, True
            if self.circuit.state == "closed":
                decide_events_on_stream(
                    self.ctx, provider_stream(self.provider), outage_left_open,
                    lambda left_open, now: end_of_outage_left_open(left_open, worker=self.owner, now=now),
                    {"actor": self.owner},
                )
