"""Password reset rules, as given events / when a command / then events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

import attrs
import pytest

from domain.counting import REJECTIONS_PER_WINDOW
from domain.decisions import ConsumeOutcome, Decision, Refused, Rejected, RequestOutcome
from domain.email import EmailQueued
from domain.errors import ConfigError, IdempotencyMismatch, InvalidInput, TokenInvalid, UnknownEventType
from domain.policy import ResetPolicy
from domain.reset import (
    LINK_REFUSALS,
    RequestReset,
    check_token,
    decide_consume,
    decide_verify_link,
    decide_reset_request,
    find_by_token_hash,
    reset_delivery_verdict,
    reset_token_for,
)
from domain.reset_events import (
    ResetCompleted,
    ResetRequested,
    ResetRequestRefused,
    ResetSuperseded,
    ResetTokenRejected,
    reset_stream,
)
from domain.reset_state import ResetState, fold_reset
from domain.tokens import SecretUnavailable, derive_reset_token, hash_token
from tests.support.keys import TEST_KEYS
from tests.support.secrets import nonce

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
KEYS = TEST_KEYS
POLICY = ResetPolicy()
USER = "42"
ALICE = "alice@example.com"


def rid(n: int) -> UUID:
    return UUID(int=n)


def mid(n: int) -> UUID:
    return UUID(int=1000 + n)


def requested(n: int, at: datetime, *, recipient: str = ALICE, key_id: str = "k2",
              idempotency_key: str | None = None, client: str | None = None) -> ResetRequested:  # fmt: skip
    """A ResetRequested as decide_reset_request would have written it."""
    token = derive_reset_token(KEYS.key(key_id), rid(n), nonce(n))
    return ResetRequested(
        rid(n), USER, recipient, key_id, hash_token(token), at, at + POLICY.ttl, mid(n),
        idempotency_key, client, derivation=2, nonce=nonce(n),
    )  # fmt: skip


def token_of(n: int) -> str:
    return derive_reset_token(KEYS.current, rid(n), nonce(n))


def when_requested(given: list[object], cmd: RequestReset, *, at: datetime, n: int) -> Decision:
    return decide_reset_request(
        fold_reset(given), cmd, now=at, request_id=rid(n), message_id=mid(n), nonce=nonce(n), keys=KEYS,
        policy=POLICY,
    )  # fmt: skip


def test_the_stream_of_a_users_resets_is_named_after_the_user() -> None:
    assert reset_stream("42") == "reset-user:42"


def test_a_first_request_issues_a_link_and_queues_one_email() -> None:
    decision = when_requested([], RequestReset(USER, ALICE), at=T0, n=1)

    assert decision.events == (requested(1, T0),)
    assert decision.emails == (
        EmailQueued(mid(1), "reset", "reset_link", USER, rid(1), ALICE, available_at=T0),
    )
    assert decision.outcome == RequestOutcome(rid(1), mid(1), T0 + timedelta(minutes=30), False)


def test_a_request_keeps_the_language_asked_for_in_its_conventional_case_and_its_state_knows_it() -> None:
    decision = when_requested([], RequestReset(USER, ALICE, locale="de-at"), at=T0, n=1)

    assert decision.events == (attrs.evolve(requested(1, T0), locale="de-AT"),)
    assert fold_reset(decision.events).requests[rid(1)].locale == "de-AT"


def test_a_language_that_is_no_tag_is_refused_before_anything_is_decided() -> None:
    with pytest.raises(InvalidInput, match="locale must be a BCP 47 language tag"):
        RequestReset(USER, ALICE, locale="Deutsch (Österreich)")


def test_a_repeat_within_the_cooldown_in_another_language_reuses_the_open_request_as_it_was() -> None:
    given = [requested(1, T0)]

    decision = when_requested(given, RequestReset(USER, ALICE, locale="de"), at=T0 + timedelta(seconds=30), n=2)

    assert decision.events == () and decision.outcome == RequestOutcome(rid(1), mid(1), T0 + POLICY.ttl, True)
    assert fold_reset(given).requests[rid(1)].locale is None


def test_the_token_itself_is_stored_nowhere_only_its_hash() -> None:
    decision = when_requested([], RequestReset(USER, ALICE), at=T0, n=1)
    token = token_of(1)

    written = [*decision.events, *decision.emails, decision.outcome]
    assert all(token not in repr(record) for record in written)
    assert decision.events[0].token_hash == hash_token(token)


def test_a_new_request_supersedes_the_open_one() -> None:
    at = T0 + timedelta(minutes=5)
    decision = when_requested([requested(1, T0)], RequestReset(USER, ALICE), at=at, n=2)

    assert decision.events == (
        ResetSuperseded(rid(1), superseded_by=rid(2), reason="new_request"),
        requested(2, at),
    )
    assert [email.request_id for email in decision.emails] == [rid(2)]


def test_a_repeat_within_the_cooldown_reuses_the_open_request_and_writes_nothing() -> None:
    at = T0 + timedelta(seconds=59)
    decision = when_requested([requested(1, T0)], RequestReset(USER, ALICE), at=at, n=2)

    assert decision == Decision((), (), RequestOutcome(rid(1), mid(1), T0 + POLICY.ttl, reused=True))


def test_a_repeat_within_the_cooldown_to_another_address_supersedes_the_open_request() -> None:
    cmd = RequestReset(USER, "bob@example.com")
    decision = when_requested([requested(1, T0)], cmd, at=T0 + timedelta(seconds=10), n=2)

    assert decision.events[0] == ResetSuperseded(rid(1), rid(2), "new_request")
    assert decision.emails[0].recipient == "bob@example.com"


def test_a_repeat_after_the_open_request_was_used_issues_a_new_one() -> None:
    given = [requested(1, T0), ResetCompleted(rid(1), USER, T0 + timedelta(seconds=5), mid(99))]
    decision = when_requested(given, RequestReset(USER, ALICE), at=T0 + timedelta(seconds=10), n=2)

    assert decision.events == (requested(2, T0 + timedelta(seconds=10)),)


def five_requests_in_the_last_hour() -> list[object]:
    given: list[object] = []
    for n in range(1, 6):
        if given:
            given.append(ResetSuperseded(rid(n - 1), rid(n), "new_request"))
        given.append(requested(n, T0 + timedelta(minutes=2 * n)))
    return given


def test_the_sixth_request_within_an_hour_is_refused_until_the_oldest_leaves_the_window() -> None:
    now = T0 + timedelta(minutes=30)
    decision = when_requested(five_requests_in_the_last_hour(), RequestReset(USER, ALICE), at=now, n=6)

    retry_at = T0 + timedelta(minutes=2, hours=1)
    assert decision == Decision(
        (ResetRequestRefused(USER, "rate_limited", now, retry_at),), (), Refused("rate_limited", retry_at)
    )


def test_a_request_is_allowed_again_once_the_oldest_leaves_the_window() -> None:
    at = T0 + timedelta(minutes=2, hours=1)
    decision = when_requested(five_requests_in_the_last_hour(), RequestReset(USER, ALICE), at=at, n=6)

    assert isinstance(decision.outcome, RequestOutcome)
    assert decision.events[-1] == requested(6, at)


def test_refusals_do_not_count_towards_the_hourly_limit() -> None:
    given = [
        requested(1, T0),
        *(ResetRequestRefused(USER, "rate_limited", T0, T0 + timedelta(hours=1)) for _ in range(9)),
    ]
    decision = when_requested(given, RequestReset(USER, ALICE), at=T0 + timedelta(minutes=2), n=2)

    assert decision.events[-1] == requested(2, T0 + timedelta(minutes=2))


def test_an_idempotent_replay_returns_the_original_outcome_marked_only_as_a_replay_and_writes_nothing() -> None:
    given = [
        requested(1, T0, idempotency_key="key-1", client="app"),
        ResetSuperseded(rid(1), rid(2), "new_request"),
        requested(2, T0 + timedelta(minutes=5)),
    ]
    cmd = RequestReset(USER, ALICE, idempotency_key="key-1", client="app")
    decision = when_requested(given, cmd, at=T0 + timedelta(minutes=10), n=3)

    assert decision == Decision((), (), RequestOutcome(rid(1), mid(1), T0 + POLICY.ttl, reused=False, replayed=True))


def test_an_idempotent_replay_is_answered_even_over_the_hourly_limit() -> None:
    given = [requested(0, T0, idempotency_key="key-1"), *five_requests_in_the_last_hour()]
    cmd = RequestReset(USER, ALICE, idempotency_key="key-1")
    decision = when_requested(given, cmd, at=T0 + timedelta(minutes=30), n=6)

    assert decision.events == ()
    assert decision.outcome == RequestOutcome(rid(0), mid(0), T0 + POLICY.ttl, reused=False, replayed=True)


def test_an_idempotency_key_reused_for_another_recipient_is_rejected() -> None:
    given = [requested(1, T0, idempotency_key="key-1")]
    with pytest.raises(IdempotencyMismatch):
        when_requested(given, RequestReset(USER, "bob@example.com", idempotency_key="key-1"), at=T0, n=2)


def test_idempotency_keys_are_scoped_per_client() -> None:
    given = [requested(1, T0, idempotency_key="key-1", client="web")]
    cmd = RequestReset(USER, ALICE, idempotency_key="key-1", client="mobile")
    decision = when_requested(given, cmd, at=T0 + timedelta(minutes=5), n=2)

    assert decision.outcome == RequestOutcome(rid(2), mid(2), T0 + timedelta(minutes=35), reused=False)


def test_an_idempotency_key_older_than_the_receipt_ttl_makes_a_new_request() -> None:
    given = [requested(1, T0, idempotency_key="key-1")]
    at = T0 + POLICY.receipt_ttl
    cmd = RequestReset(USER, "bob@example.com", idempotency_key="key-1")
    decision = when_requested(given, cmd, at=at, n=2)

    assert decision.events[-1] == requested(2, at, recipient="bob@example.com", idempotency_key="key-1")


@pytest.mark.parametrize(
    ("user_id", "recipient"),
    [("", ALICE), ("42", "not-an-address"), ("42", "a@b.example\r\nBcc: evil@example.com"), ("4 2", ALICE)],
)
def test_malformed_requests_are_refused_before_anything_is_decided(user_id: str, recipient: str) -> None:
    with pytest.raises(InvalidInput):
        RequestReset(user_id, recipient)


def test_a_naive_clock_reading_is_refused() -> None:
    with pytest.raises(ValueError, match="UTC"):
        when_requested([], RequestReset(USER, ALICE), at=datetime(2025, 3, 1, 12), n=1)


def test_an_open_unexpired_token_checks_out() -> None:
    state = fold_reset([requested(1, T0)])
    request = check_token(state, hash_token(token_of(1)), now=T0 + timedelta(minutes=29))
    assert (request.request_id, request.status) == (rid(1), "open")
    assert find_by_token_hash(state, hash_token(token_of(1))) == request


@pytest.mark.parametrize(
    ("given", "now", "reason"),
    [
        ([], T0, "not valid"),
        ([requested(1, T0)], T0 + timedelta(minutes=30), "expired"),
        ([requested(1, T0), ResetSuperseded(rid(1), rid(2), "new_request")], T0, "replaced"),
        ([requested(1, T0), ResetCompleted(rid(1), USER, T0, mid(9))], T0, "already used"),
    ],
)
def test_a_token_that_is_unknown_expired_superseded_or_used_is_invalid(
    given: list[object], now: datetime, reason: str
) -> None:
    token_hash = hash_token(token_of(1))
    with pytest.raises(TokenInvalid, match=reason) as raised:
        check_token(fold_reset(given), token_hash, now=now)
    assert token_hash not in str(raised.value) and token_of(1) not in str(raised.value)


def test_a_token_signed_before_a_key_rotation_still_verifies_until_it_expires() -> None:
    state = fold_reset([requested(1, T0, key_id="k1")])
    token = reset_token_for(state.requests[rid(1)], KEYS)

    assert token == derive_reset_token(KEYS.keys["k1"], rid(1), nonce(1))
    assert check_token(state, hash_token(token), now=T0).key_id == "k1"


def test_a_token_of_derivation_2_differs_from_derivation_1_for_the_same_request_and_key() -> None:
    v1, v2 = derive_reset_token(KEYS.current, rid(1)), derive_reset_token(KEYS.current, rid(1), nonce(1))
    assert v1 != v2 and v2 != derive_reset_token(KEYS.current, rid(1), nonce(2))
    made = when_requested([], RequestReset(USER, ALICE), at=T0, n=1).events[0]
    assert (made.derivation, made.nonce) == (2, nonce(1))
    assert made.token_hash == hash_token(v2) != hash_token(v1), "key plus public id no longer yields the token"


def test_a_request_made_before_nonces_still_verifies_with_derivation_1() -> None:
    token = derive_reset_token(KEYS.current, rid(1))
    before = attrs.evolve(requested(1, T0), token_hash=hash_token(token), derivation=1, nonce=None)
    state = fold_reset([before])
    assert reset_token_for(state.requests[rid(1)], KEYS) == token
    assert check_token(state, hash_token(token), now=T0).request_id == rid(1)


def test_a_link_whose_nonce_reads_erased_is_refused_as_not_valid_and_the_refusal_recorded() -> None:
    state = fold_reset([attrs.evolve(requested(1, T0), nonce="[erased]")])
    with pytest.raises(TokenInvalid, match="^The reset link is not valid.$"):
        check_token(state, hash_token(token_of(1)), now=T0)
    decision = decide_consume(state, hash_token(token_of(1)), now=T0, notice_message_id=mid(50))
    assert decision.events == (ResetTokenRejected(rid(1), "erased", T0),) and decision.emails == ()
    assert decision.outcome == Rejected("erased", "The reset link is not valid.")
    with pytest.raises(SecretUnavailable):
        reset_token_for(state.requests[rid(1)], KEYS)


@pytest.mark.parametrize(
    ("given", "now", "reason"),
    [
        ([requested(1, T0), ResetCompleted(rid(1), USER, T0, mid(50))], T0, "used"),
        ([requested(1, T0), ResetSuperseded(rid(1), rid(2), "new_request")], T0, "superseded"),
        ([requested(1, T0)], T0 + POLICY.ttl, "expired"),
    ],
)
def test_a_known_link_that_can_no_longer_be_used_is_refused_and_the_refusal_recorded(
    given: list[object], now: datetime, reason: str
) -> None:
    for decide in (decide_verify_link, lambda *a, **k: decide_consume(*a, **k, notice_message_id=mid(51))):
        decision = decide(fold_reset(given), hash_token(token_of(1)), now=now, client="app")
        assert decision.events == (ResetTokenRejected(rid(1), reason, now),) and decision.emails == ()
        assert decision.outcome == Rejected(reason, LINK_REFUSALS[reason])


def test_an_unknown_link_writes_nothing() -> None:
    with pytest.raises(TokenInvalid, match="not valid"):
        decide_verify_link(fold_reset([requested(1, T0)]), hash_token("x" * 43), now=T0)


def test_rejected_presentations_neither_end_nor_extend_a_run_of_refusals() -> None:
    refused = ResetRequestRefused(USER, "rate_limited", T0, T0 + timedelta(hours=1))
    before = fold_reset([requested(1, T0), refused])
    after = fold_reset([ResetTokenRejected(rid(1), "used", T0)], before)
    assert after.run == before.run and after.rejections is not None


def test_rejected_presentations_past_the_bound_of_a_window_are_counted_not_written() -> None:
    given: list[object] = [requested(1, T0), ResetCompleted(rid(1), USER, T0, mid(50))]
    written = 0
    for n in range(500):
        decision = decide_verify_link(fold_reset(given), hash_token(token_of(1)), now=T0 + timedelta(seconds=n))
        assert isinstance(decision.outcome, Rejected)
        written += len(decision.events)
        assert decision.events or decision.counted is not None
        given += decision.events
    assert written == REJECTIONS_PER_WINDOW


def test_consuming_a_token_completes_the_request_and_queues_a_notice() -> None:
    state = fold_reset([requested(1, T0)])
    now = T0 + timedelta(minutes=3)
    decision = decide_consume(state, hash_token(token_of(1)), now=now, notice_message_id=mid(50))

    assert decision.events == (ResetCompleted(rid(1), USER, now, mid(50)),)
    assert decision.emails == (
        EmailQueued(mid(50), "reset", "password_changed", USER, rid(1), ALICE, available_at=now),
    )
    assert decision.outcome == ConsumeOutcome(rid(1), USER, now)


def test_a_completed_reset_supersedes_every_other_open_request() -> None:
    # Two open requests only arise from a log written by other rules (an
    # older release, a manual repair); consuming must still close them all.
    state = fold_reset([requested(1, T0), requested(2, T0 + timedelta(minutes=1))])
    now = T0 + timedelta(minutes=2)
    decision = decide_consume(state, hash_token(token_of(2)), now=now, notice_message_id=mid(50))

    assert decision.events[1:] == (ResetSuperseded(rid(1), superseded_by=None, reason="password_changed"),)


def test_a_token_is_single_use() -> None:
    given: list[object] = [requested(1, T0)]
    token_hash = hash_token(token_of(1))
    first = decide_consume(fold_reset(given), token_hash, now=T0, notice_message_id=mid(50))
    after = fold_reset([*given, *first.events])
    second = decide_consume(after, token_hash, now=T0, notice_message_id=mid(51))
    assert second.outcome == Rejected("used", "The reset link was already used.")
    assert second.events == (ResetTokenRejected(rid(1), "used", T0),) and second.emails == ()


@pytest.mark.parametrize(
    ("given", "now", "template", "verdict"),
    [
        ([requested(1, T0)], T0, "reset_link", None),
        ([], T0, "reset_link", "unknown_request"),
        ([requested(1, T0), ResetSuperseded(rid(1), rid(2), "new_request")], T0, "reset_link", "superseded"),
        ([requested(1, T0)], T0 + timedelta(minutes=30), "reset_link", "expired"),
        ([requested(1, T0), ResetCompleted(rid(1), USER, T0, mid(9))], T0, "reset_link", "consumed"),
        ([requested(1, T0), ResetCompleted(rid(1), USER, T0, mid(9))], T0 + timedelta(days=3),
         "password_changed", None),
        ([requested(1, T0)], T0, "password_changed", "not_completed"),
    ],
)
def test_the_worker_sends_only_what_fresh_state_still_wants_sent(
    given: list[object], now: datetime, template: str, verdict: str | None
) -> None:
    assert reset_delivery_verdict(fold_reset(given), rid(1), now=now, template=template) == verdict


def test_an_event_of_another_stream_cannot_be_folded_into_reset_state() -> None:
    email = EmailQueued(mid(1), "reset", "reset_link", USER, rid(1), ALICE, T0)
    with pytest.raises(UnknownEventType):
        fold_reset([email])


def test_events_about_unknown_requests_change_nothing() -> None:
    state = fold_reset(
        [ResetSuperseded(rid(7), None, "password_changed"), ResetCompleted(rid(8), USER, T0, mid(1))]
    )
    assert state == fold_reset([])
    assert isinstance(state, ResetState)


def test_the_default_reset_policy_matches_the_design() -> None:
    assert attrs.asdict(POLICY, recurse=False) == {
        "ttl": timedelta(minutes=30),
        "cooldown": timedelta(seconds=60),
        "hourly_limit": 5,
        "receipt_ttl": timedelta(hours=24),
    }


def test_a_reset_link_may_not_live_longer_than_a_day() -> None:
    assert ResetPolicy(ttl=timedelta(hours=24)).ttl == timedelta(hours=24)
    with pytest.raises(ConfigError, match="hard cap"):
        ResetPolicy(ttl=timedelta(hours=24, seconds=1))


@pytest.mark.parametrize(
    "overrides",
    [{"ttl": timedelta(0)}, {"cooldown": timedelta(seconds=-1)}, {"hourly_limit": 0}, {"hourly_limit": True},
     {"receipt_ttl": 60}],
)  # fmt: skip
def test_a_reset_policy_with_a_non_positive_or_mistyped_value_is_refused(overrides: dict) -> None:
    with pytest.raises(ConfigError):
        ResetPolicy(**overrides)
