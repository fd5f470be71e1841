"""The circuit breaker: an outage is recognised across messages, probed one at a time, and closed on recovery."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from domain.circuit import Circuit, CircuitPolicy, Outcome, Transition, claim_allowance, observe, probe_claimed

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
POLICY = CircuitPolicy(failures_to_open=3, first_pause=timedelta(seconds=1), max_pause=timedelta(seconds=4))


def fail(
    circuit: Circuit, message_id: uuid.UUID | None = None, at: datetime = NOW,
) -> tuple[Circuit, Transition | None]:
    return observe(circuit, Outcome.DOWN, message_id=message_id or uuid.uuid4(), now=at, error="connection refused",
                   policy=POLICY)


def opened() -> Circuit:
    circuit = Circuit()
    for _ in range(3):
        circuit, _ = fail(circuit)
    return circuit


def test_a_closed_circuit_lets_the_worker_fill_its_window() -> None:
    assert claim_allowance(Circuit(), now=NOW, room=64) == 64


def test_failures_of_different_messages_in_a_row_open_the_circuit() -> None:
    circuit, first = fail(Circuit())
    circuit, second = fail(circuit)
    circuit, third = fail(circuit)

    assert (first, second, third) == (None, None, Transition.OPENED)
    assert circuit.state == "open" and circuit.opened_at == NOW and circuit.last_error == "connection refused"
    assert claim_allowance(circuit, now=NOW, room=64) == 0


def test_one_message_failing_again_and_again_is_not_an_outage() -> None:
    message_id = uuid.uuid4()
    circuit = Circuit()
    for _ in range(10):
        circuit, transition = fail(circuit, message_id)
        assert transition is None

    assert circuit.state == "closed"


def test_an_answer_from_the_provider_resets_the_count() -> None:
    circuit, _ = fail(Circuit())
    circuit, _ = fail(circuit)
    circuit, _ = observe(circuit, Outcome.ANSWERED, message_id=uuid.uuid4(), now=NOW, policy=POLICY)
    circuit, transition = fail(circuit)

    assert transition is None and circuit.state == "closed"


def test_once_the_pause_is_over_one_probe_goes_out_and_nothing_else() -> None:
    circuit = opened()

    assert claim_allowance(circuit, now=NOW + timedelta(milliseconds=999), room=64) == 0
    assert claim_allowance(circuit, now=NOW + timedelta(seconds=1), room=64) == 1
    probing = probe_claimed(circuit)
    assert probing.state == "half_open"
    assert claim_allowance(probing, now=NOW + timedelta(seconds=5), room=64) == 0


def test_a_probe_that_gets_through_closes_the_circuit() -> None:
    probing = probe_claimed(opened())

    circuit, transition = observe(probing, Outcome.ANSWERED, message_id=uuid.uuid4(), now=NOW, policy=POLICY)

    assert transition is Transition.CLOSED
    assert circuit == Circuit()
    assert claim_allowance(circuit, now=NOW, room=64) == 64


def test_a_failed_probe_reopens_with_a_longer_pause_up_to_the_cap() -> None:
    circuit, at = opened(), NOW
    pauses = []
    for _ in range(4):
        at = circuit.probe_at
        circuit, transition = fail(probe_claimed(circuit), at=at)
        assert transition is Transition.REOPENED
        pauses.append(circuit.probe_at - at)

    assert pauses == [timedelta(seconds=s) for s in (2, 4, 4, 4)]
    assert circuit.opened_at == NOW, "the outage began when it was first recognised"


def test_sends_that_were_in_flight_when_it_opened_change_nothing() -> None:
    circuit = opened()

    after, transition = fail(circuit)

    assert transition is None and after.probe_at == circuit.probe_at


def test_a_late_answer_to_a_send_made_before_it_opened_does_not_close_it() -> None:
    circuit = opened()

    after, transition = observe(circuit, Outcome.ANSWERED, message_id=uuid.uuid4(), now=NOW, policy=POLICY)

    assert transition is None and after == circuit, "only the probe's answer closes it"
