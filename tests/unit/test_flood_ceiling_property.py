"""The ceiling holds over any sequence of calls (issue 36): a property of the rules and of the counting.

Random bursts of reset and OTP creates (random addresses, purposes, clients,
idempotency keys old and new), right and wrong codes, links presented
again, and time moving by random steps across hours of the clock, against
random policies. Decisions are the domain's; what the unit of work does with
them (a counted call bumps its answer's row, an append first writes the rows
when ``counts_fit``, ``serve`` writes the rows of a closed window) is played
by a small model of ``request_counts`` beside the log. Then, in every window
and for each stream: the events floods wrote one by one never exceed the
ceiling, nor the ceiling and its closing counts with the counts; no call is
lost; and each hour adds no more events than ``domain.stream_growth`` says.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import attrs
from hypothesis import currently_in_test_context, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from domain.counting import (
    CLOSING_COUNTS,
    FLOOD_EVENTS_PER_WINDOW,
    RequestsCounted,
    counts_fit,
    flood_window,
    window_of,
)
from domain.decisions import Counted, Decision, RequestOutcome
from domain.errors import CodeRejected, IdempotencyMismatch, LockedOut, TokenInvalid
from domain.otp import RequestOtp, decide_otp_request, decide_otp_verify
from domain.otp_state import evolve_otp, fold_otp
from domain.policy import OtpPolicy, ResetPolicy
from domain.reset import RequestReset, decide_consume, decide_reset_request, decide_verify_link
from domain.reset_state import evolve_reset, fold_reset
from domain.stream_growth import otp_events_per_hour_at_most, reset_events_per_hour_at_most
from domain.tokens import derive_otp_code, derive_reset_token, hash_token
from tests.support.keys import TEST_KEYS
from tests.support.secrets import nonce

T0 = datetime(2025, 3, 1, 9, 40, tzinfo=UTC)
KEYS = TEST_KEYS
USER = "victim"
FRESH = "fresh"  # a key no call used before: what an attacker varies most cheaply

addresses = st.sampled_from(["a@example.test", "b@example.test", "c@example.test"])
keys = st.sampled_from([None, None, "k1", "k2", FRESH, FRESH])
clients = st.sampled_from([None, "app", "other"])
calls = st.one_of(
    st.tuples(st.just("reset"), addresses, keys, clients),
    st.tuples(st.just("otp"), addresses, st.sampled_from(["login", "mfa", "step_up"]), keys, clients),
    st.tuples(st.just("code"), st.sampled_from(["newest", "older", "unknown"]), st.booleans(), clients),
    st.tuples(st.just("link"), st.sampled_from(["newest", "older"]), st.booleans(), clients),
    st.tuples(st.just("tick"), st.sampled_from([1, 30, 61])),
)


def note(what: str) -> None:
    """Count ``what`` in the property's statistics (the machine also runs outside one, in the last test)."""
    if currently_in_test_context():
        event(what)


def made_new(decision: Decision) -> bool:
    return isinstance(decision.outcome, RequestOutcome) and not decision.outcome.reused


@attrs.define
class Row:
    """A ``request_counts`` row, as infra/services/counts.py keeps it."""

    flow: str
    window_start: datetime
    first_at: datetime
    last_at: datetime
    count: int
    clients: list[str | None]

    def as_event(self, answer: str) -> RequestsCounted:
        return RequestsCounted(self.flow, USER, answer, self.window_start, self.first_at, self.last_at,
                               self.count, tuple(self.clients))


@attrs.define
class Stream:
    """One user stream with its counts: the log (each event with the hour it was appended in) and the rows."""

    evolve: Callable[[Any, object], Any]
    state: Any
    log: list[tuple[datetime, object]] = attrs.field(factory=list)
    rows: dict[str, Row] = attrs.field(factory=dict)  # by answer: at most one row per stream and answer
    flood_calls: int = 0  # calls answered by an event of a flood or counted

    def record(self, decision: Decision, now: datetime) -> None:
        """What the unit of work does with a decision (``_with_counts``)."""
        if decision.counted is not None:
            self.flood_calls += 1
            self._count(decision.counted)
            return
        self.flood_calls += any(flood_window(e) is not None for e in decision.events)
        if not decision.events:
            return
        pending = self._pending()
        if pending and counts_fit(self.state.flood, pending, decision.events, now=now):
            self.rows.clear()
            self._append(pending, now)
        self._append(decision.events, now)

    def close_windows(self, now: datetime) -> None:
        """What ``serve`` does once a window has closed (``write_closed_counts``)."""
        closed = {answer: row for answer, row in self.rows.items() if row.window_start < window_of(now)}
        for answer in closed:
            del self.rows[answer]
        self._append(sorted((row.as_event(answer) for answer, row in closed.items()), key=lambda e: e.first_at),
                     now)

    def _count(self, counted: Counted) -> None:
        row = self.rows.get(counted.answer)
        if row is None:
            self.rows[counted.answer] = Row(counted.flow, window_of(counted.at), counted.at, counted.at, 1,
                                            [counted.client])
            return
        row.last_at, row.count = max(row.last_at, counted.at), row.count + 1
        if counted.client not in row.clients:
            row.clients.append(counted.client)

    def _pending(self) -> list[RequestsCounted]:
        return sorted((row.as_event(answer) for answer, row in self.rows.items()), key=lambda e: e.first_at)

    def _append(self, events: tuple[object, ...] | list[RequestsCounted], now: datetime) -> None:
        for appended in events:
            self.state = self.evolve(self.state, appended)
            self.log.append((now, appended))


class FloodsOnOneUser(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.reset = Stream(evolve_reset, fold_reset([]))
        self.otp = Stream(evolve_otp, fold_otp([]))
        self.requests: list[UUID] = []
        self.challenges: list[UUID] = []
        self.next_id = 0
        self.reset_policy = ResetPolicy()
        self.otp_policy = OtpPolicy()

    @initialize(
        hourly_limit=st.integers(1, 8), cooldown=st.sampled_from([0, 60, 600]), max_attempts=st.integers(1, 5),
        account_lock_threshold=st.sampled_from([2, 5, 100]),
    )
    def policies(self, hourly_limit: int, cooldown: int, max_attempts: int, account_lock_threshold: int) -> None:
        self.reset_policy = ResetPolicy(hourly_limit=hourly_limit, cooldown=timedelta(seconds=cooldown))
        self.otp_policy = OtpPolicy(hourly_limit=hourly_limit, cooldown=timedelta(seconds=cooldown),
                                    max_attempts=max_attempts, account_lock_threshold=account_lock_threshold,
                                    account_lock_base=timedelta(minutes=5), account_lock_max=timedelta(minutes=40))

    def _fresh_id(self) -> UUID:
        self.next_id += 1
        return UUID(int=self.next_id)

    def _key(self, key: str | None) -> str | None:
        return f"fresh-{self._fresh_id()}" if key == FRESH else key

    # A flood is a pattern of calls repeated: alternating addresses, a new key each time, a wrong code between.
    @rule(pattern=st.lists(calls, min_size=1, max_size=6), times=st.sampled_from([1, 2, 5, 15, 40]))
    def calls(self, pattern: list[tuple[Any, ...]], times: int) -> None:
        for _ in range(times):
            for call in pattern:
                try:
                    self._call(call)
                except (IdempotencyMismatch, LockedOut, CodeRejected, TokenInvalid) as error:
                    note(f"{call[0]}: {type(error).__name__}")  # raised: nothing written, nothing counted

    def _call(self, call: tuple[Any, ...]) -> None:
        match call:
            case ("reset", recipient, key, client):
                request_id = self._fresh_id()
                decision = decide_reset_request(
                    self.reset.state, RequestReset(USER, recipient, self._key(key), client), now=self.now,
                    request_id=request_id, message_id=self._fresh_id(), nonce=nonce(request_id.int), keys=KEYS,
                    policy=self.reset_policy)
                if made_new(decision):
                    self.requests.append(request_id)
                self.reset.record(decision, self.now)
            case ("otp", recipient, purpose, key, client):
                challenge_id = self._fresh_id()
                decision = decide_otp_request(
                    self.otp.state, RequestOtp(USER, recipient, purpose, self._key(key), client), now=self.now,
                    challenge_id=challenge_id, message_id=self._fresh_id(), nonce=nonce(challenge_id.int),
                    keys=KEYS, policy=self.otp_policy)
                if made_new(decision):
                    self.challenges.append(challenge_id)
                self.otp.record(decision, self.now)
            case ("code", which, right, client):
                challenge_id = self._pick(self.challenges, which)
                code = derive_otp_code(KEYS.current, challenge_id, self.otp_policy.digits, nonce(challenge_id.int))
                if not right:
                    code = f"{(int(code) + 1) % 10**len(code):0{len(code)}d}"
                self.otp.record(decide_otp_verify(self.otp.state, challenge_id, code, now=self.now, keys=KEYS,
                                                  policy=self.otp_policy, client=client), self.now)
            case ("link", which, consume, client) if self.requests:
                request_id = self._pick(self.requests, which)
                token_hash = hash_token(derive_reset_token(KEYS.current, request_id, nonce(request_id.int)))
                decision = (decide_consume(self.reset.state, token_hash, now=self.now,
                                           notice_message_id=self._fresh_id(), client=client) if consume
                            else decide_verify_link(self.reset.state, token_hash, now=self.now, client=client))
                self.reset.record(decision, self.now)
            case ("tick", seconds):
                self.now += timedelta(seconds=seconds)

    def _pick(self, made: list[UUID], which: str) -> UUID:
        if which == "unknown" or not made:
            return UUID(int=10**12)
        return made[-1] if which == "newest" else made[0]

    @rule(seconds=st.sampled_from([600, 1800, 3599, 3600, 7200]))
    def wait(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    @rule()
    def serve_writes_closed_windows(self) -> None:
        self.reset.close_windows(self.now)
        self.otp.close_windows(self.now)

    @invariant()
    def floods_stay_under_the_ceiling_in_every_window(self) -> None:
        for stream in (self.reset, self.otp):
            events = [e for _, e in stream.log]
            one_by_one = Counter(flood_window(e) for e in events
                                 if flood_window(e) is not None and not isinstance(e, RequestsCounted))
            with_counts = Counter(w for e in events if (w := flood_window(e)) is not None)
            assert max(one_by_one.values(), default=0) <= FLOOD_EVENTS_PER_WINDOW, one_by_one
            assert max(with_counts.values(), default=0) <= FLOOD_EVENTS_PER_WINDOW + CLOSING_COUNTS, with_counts
            if max(with_counts.values(), default=0) >= FLOOD_EVENTS_PER_WINDOW:
                note("a window reached the ceiling")

    @invariant()
    def no_call_is_lost(self) -> None:
        for stream in (self.reset, self.otp):
            logged = sum(e.count if isinstance(e, RequestsCounted) else 1 for _, e in stream.log
                         if flood_window(e) is not None)
            assert logged + sum(row.count for row in stream.rows.values()) == stream.flood_calls

    @invariant()
    def the_counts_waiting_are_of_one_window_at_most(self) -> None:
        for stream in (self.reset, self.otp):
            assert len({row.window_start for row in stream.rows.values()}) <= 1
            assert all(row.window_start <= window_of(self.now) for row in stream.rows.values())

    @invariant()
    def an_hour_adds_no_more_events_than_the_stated_bound(self) -> None:
        for stream, bound in ((self.reset, reset_events_per_hour_at_most(self.reset_policy)),
                              (self.otp, otp_events_per_hour_at_most(self.otp_policy))):
            per_hour = Counter(window_of(at) for at, _ in stream.log)
            assert max(per_hour.values(), default=0) <= bound, (per_hour, bound)

    @invariant()
    def replaying_the_log_gives_the_same_state(self) -> None:
        assert fold_reset(e for _, e in self.reset.log) == self.reset.state
        assert fold_otp(e for _, e in self.otp.log) == self.otp.state


FloodsOnOneUser.TestCase.settings = settings(max_examples=60, stateful_step_count=20, deadline=None)
test_the_ceiling_holds_over_any_sequence_of_calls_addresses_keys_purposes_and_hours = FloodsOnOneUser.TestCase


def test_the_finding_alternating_two_addresses_with_a_new_key_each_call_meets_the_ceiling_and_nothing_more() -> None:
    # The review's flood, at the default policies: 1,000 reset creates wrote 1,004 events before the ceiling.
    flow = FloodsOnOneUser()
    flow.calls([("reset", "a@example.test", FRESH, "app"), ("reset", "b@example.test", FRESH, "app")], times=500)
    flow.calls([("otp", "a@example.test", "login", FRESH, None), ("code", "older", False, None),
                ("otp", "b@example.test", "mfa", FRESH, None)], times=300)
    flow.wait(3600)
    flow.serve_writes_closed_windows()

    for stream, made in ((flow.reset, flow.requests), (flow.otp, flow.challenges)):
        events = [e for _, e in stream.log]
        assert len(made) == ResetPolicy().hourly_limit
        assert sum(flood_window(e) is not None and not isinstance(e, RequestsCounted)
                   for e in events) <= FLOOD_EVENTS_PER_WINDOW
        assert sum(flood_window(e) is not None for e in events) <= FLOOD_EVENTS_PER_WINDOW + CLOSING_COUNTS
        assert not stream.rows, "the window closed: every count is in the log"
    assert len(flow.reset.log) <= reset_events_per_hour_at_most(ResetPolicy()) == 49
    assert len(flow.otp.log) <= otp_events_per_hour_at_most(OtpPolicy()) == 86
    flow.floods_stay_under_the_ceiling_in_every_window()
    flow.no_call_is_lost()
    flow.replaying_the_log_gives_the_same_state()
