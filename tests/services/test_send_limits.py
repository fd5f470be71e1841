"""The limits beyond the user on real PostgreSQL: per address, per end-user IP, race-safe, writing nothing
when refused."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import attrs
import pytest
from sqlalchemy import Engine, text

from domain.decisions import RequestOutcome
from domain.errors import CodeRejected, InvalidInput
from domain.otp import RequestOtp
from domain.reset import RequestReset
from domain.send_limits import Counter, SendLimits
from infra.clock import ManualClock
from infra.errors import RateLimited
from infra.services.otp import request_otp, verify_code
from infra.services.reset import request_reset
from infra.services.send_limits import delete_past_windows, take
from infra.services.unit_of_work import ServiceContext
from tests.support.log_lines import logged_lines
from tests.support.replay import assert_projections_match_log
from tests.support.secrets import otp_code_of
from tests.support.wire import at_the_wire

ADA = "ada@example.test"
# Ten past an hour: a test's minutes never cross into the next window unless it says so.
START = datetime(2026, 3, 1, 10, 10, tzinfo=UTC)
ROWS = text("SELECT (SELECT count(*) FROM events) AS events, (SELECT count(*) FROM subject_keys) AS keys, "
            "(SELECT count(*) FROM email_outbox) AS emails, "
            "(SELECT coalesce(sum(count), 0) FROM limit_counts) AS counted")


@pytest.fixture
def limited(ctx: ServiceContext) -> ServiceContext:
    """The services with the default send limits and a clock ten minutes into an hour."""
    return attrs.evolve(ctx, send_limits=SendLimits(), clock=ManualClock(START))


def rows(engine: Engine) -> dict[str, int]:
    with engine.connect() as connection:
        return dict(connection.execute(ROWS).one()._asdict())


def new_user() -> str:
    return f"u-{uuid4().hex[:12]}"


def refusal(call: Any) -> RateLimited:
    with pytest.raises(RateLimited) as refused:
        call()
    return refused.value


def test_sixty_made_up_users_at_one_address_get_six_emails_and_the_rest_write_nothing(
    limited: ServiceContext, engine: Engine
) -> None:
    for _ in range(6):
        request_otp(limited, RequestOtp(new_user(), ADA))
    before = rows(engine)

    for _ in range(54):
        refused = refusal(lambda: request_otp(limited, RequestOtp(new_user(), ADA)))
        assert refused.quota is not None and refused.quota.name == "per-address" and refused.quota.count == 6
        assert refused.retry_at == datetime(2026, 3, 1, 11, 0, tzinfo=UTC)
        assert ADA not in str(refused)

    assert rows(engine) == before, "no event, no data key, no email, no count for a refusal"
    assert before["emails"] == 6 and before["counted"] == 6
    assert_projections_match_log(engine)


def test_racing_creates_of_different_users_at_one_address_never_take_more_than_its_allowance(
    limited: ServiceContext, engine: Engine
) -> None:
    barrier = threading.Barrier(16)

    def one(user: str) -> RequestOutcome | Exception:
        barrier.wait()
        try:
            return request_reset(limited, RequestReset(user, ADA))
        except RateLimited as refused:
            return refused

    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(one, [new_user() for _ in range(16)]))

    assert sum(isinstance(a, RequestOutcome) for a in answers) == 6
    assert sum(isinstance(a, RateLimited) for a in answers) == 10
    assert rows(engine)["emails"] == 6
    assert_projections_match_log(engine)


def test_both_flows_share_the_address_allowance(limited: ServiceContext) -> None:
    for _ in range(3):
        request_reset(limited, RequestReset(new_user(), ADA))
        request_otp(limited, RequestOtp(new_user(), ADA))
    assert refusal(lambda: request_reset(limited, RequestReset(new_user(), ADA))).quota.name == "per-address"


def test_what_sends_nothing_takes_nothing(limited: ServiceContext, engine: Engine) -> None:
    user = new_user()
    request_otp(limited, RequestOtp(user, ADA, idempotency_key="k-1"))
    request_otp(limited, RequestOtp(user, ADA, idempotency_key="k-1"))  # a replay of the key
    request_otp(limited, RequestOtp(user, ADA))  # a repeat within the cooldown, answered with the open challenge
    assert rows(engine)["counted"] == 1


def test_the_address_is_counted_by_its_keyed_hash_whatever_its_case(limited: ServiceContext, engine: Engine) -> None:
    for address in ("ada@example.test", "ADA@Example.test", " Ada@example.TEST"):
        request_reset(limited, RequestReset(new_user(), address.strip()))
    with engine.connect() as connection:
        [counter] = connection.execute(text("SELECT counter FROM limit_counts")).scalars()
    assert "@" not in counter and "example" not in counter
    assert counter.startswith("address default k2:") and rows(engine)["counted"] == 3


def test_an_hour_later_the_address_has_its_allowance_again_and_past_hours_are_deleted(
    limited: ServiceContext, engine: Engine
) -> None:
    for _ in range(6):
        request_otp(limited, RequestOtp(new_user(), ADA))
    refusal(lambda: request_otp(limited, RequestOtp(new_user(), ADA)))
    assert isinstance(limited.clock, ManualClock)
    limited.clock.advance(timedelta(minutes=50))

    request_otp(limited, RequestOtp(new_user(), ADA))
    assert delete_past_windows(limited) == 1
    assert rows(engine)["counted"] == 1


def test_one_ip_cannot_use_up_a_users_allowance(limited: ServiceContext, engine: Engine) -> None:
    victim = new_user()
    attacker_ip, victim_ip = "198.51.100.66", "203.0.113.7"
    clock = limited.clock
    assert isinstance(clock, ManualClock)
    answers = []
    for n in range(20):  # a new address each time, so that no call is answered with the open request
        try:
            answers.append(request_reset(limited, RequestReset(victim, f"mallory{n}@example.test"),
                                         client_ip=attacker_ip))
        except RateLimited as refused:
            answers.append(refused)
    accepted = [a for a in answers if isinstance(a, RequestOutcome)]
    refused = [a for a in answers if isinstance(a, RateLimited)]
    assert len(accepted) == 3 and len(refused) == 17
    assert {r.quota.name for r in refused if r.quota} == {"per-user-ip"}

    own = request_reset(limited, RequestReset(victim, ADA), client_ip=victim_ip)
    assert not own.reused
    assert rows(engine)["emails"] == 4
    assert_projections_match_log(engine)


def test_one_ip_cannot_use_up_an_addresses_allowance_across_made_up_users(limited: ServiceContext) -> None:
    for _ in range(3):
        request_otp(limited, RequestOtp(new_user(), ADA), client_ip="198.51.100.66")
    refused = refusal(lambda: request_otp(limited, RequestOtp(new_user(), ADA), client_ip="198.51.100.66"))
    assert refused.quota is not None and refused.quota.name == "per-address-ip"
    assert not request_otp(limited, RequestOtp(new_user(), ADA), client_ip="203.0.113.7").reused  # the owner


def test_an_ipv6_end_user_counts_as_their_64(limited: ServiceContext) -> None:
    for host in ("2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:aaaa:bbbb:cccc:dddd"):
        request_otp(limited, RequestOtp(new_user(), ADA), client_ip=host)
    refused = refusal(lambda: request_otp(limited, RequestOtp(new_user(), ADA), client_ip="2001:db8:1:2:ffff::9"))
    assert refused.quota is not None and refused.quota.name == "per-address-ip"
    request_otp(limited, RequestOtp(new_user(), ADA), client_ip="2001:db8:1:3::1")  # another /64


def test_one_ip_gets_a_bounded_number_of_emails_across_users_and_addresses(ctx: ServiceContext) -> None:
    limited = attrs.evolve(ctx, send_limits=SendLimits(per_ip=4), clock=ManualClock(START))
    for n in range(4):
        request_reset(limited, RequestReset(new_user(), f"user{n}@example.test"), client_ip="198.51.100.66")
    refused = refusal(lambda: request_reset(limited, RequestReset(new_user(), "user9@example.test"),
                                            client_ip="198.51.100.66"))
    assert refused.quota is not None and refused.quota.name == "per-ip" and refused.quota.count == 4


def test_a_client_ip_that_is_no_ip_is_invalid_input_and_writes_nothing(
    limited: ServiceContext, engine: Engine
) -> None:
    before = rows(engine)
    with pytest.raises(InvalidInput):
        request_reset(limited, RequestReset(new_user(), ADA), client_ip="203.0.113.7:443")
    with pytest.raises(InvalidInput):
        verify_code(limited, uuid4(), "123456", user_id="u1", client_ip="not-an-ip")
    assert rows(engine) == before


def test_an_ip_past_its_checks_is_refused_whatever_the_code_and_another_ip_is_not(
    ctx: ServiceContext, engine: Engine
) -> None:
    limited = attrs.evolve(ctx, send_limits=SendLimits(verifies_per_ip=2), clock=ManualClock(START))
    user = new_user()
    challenge = request_otp(limited, RequestOtp(user, ADA))
    right = otp_code_of(engine, limited.keys, challenge.request_id)
    wrong = str((int(right) + 1) % 10 ** len(right)).zfill(len(right))
    for _ in range(2):
        with pytest.raises(CodeRejected):
            verify_code(limited, challenge.request_id, wrong, user_id=user, client_ip="198.51.100.66")
    before = rows(engine)

    for code in (wrong, right):  # the same answer either way: a refusal says nothing of the code
        refused = refusal(lambda: verify_code(limited, challenge.request_id, code, user_id=user,
                                              client_ip="198.51.100.66"))
        assert refused.quota is not None and refused.quota.name == "verify-ip"
    assert rows(engine) == before, "a refused check records no attempt"

    assert verify_code(limited, challenge.request_id, right, user_id=user, client_ip="203.0.113.7").verified


def test_callers_of_unrelated_addresses_never_wait_for_one_another(limited: ServiceContext, engine: Engine) -> None:
    # A transaction holds the counter of one address (as a create does until it commits) ...
    held = Counter(limited.send_limits.quota("per-address"), "address default k2:held")
    with engine.begin() as connection:
        take(connection, [held], now=START)
        # ... while a create for another address runs to its end in another thread.
        finished = threading.Event()
        worker = threading.Thread(target=lambda: (request_otp(limited, RequestOtp(new_user(), ADA)), finished.set()))
        worker.start()
        worker.join(timeout=60)
        assert finished.is_set(), "the create waited for an unrelated address's counter"


def test_a_refusal_by_the_address_limit_is_the_lock_the_read_and_the_count_and_writes_nothing(
    limited: ServiceContext, engine: Engine
) -> None:
    for _ in range(6):
        request_otp(limited, RequestOtp(new_user(), ADA))
    refusal(lambda: request_otp(limited, RequestOtp(new_user(), ADA)))  # warm: the statements are prepared

    with at_the_wire(engine) as wire:
        refusal(lambda: request_otp(limited, RequestOtp(new_user(), ADA, idempotency_key=uuid4().hex)))

    # The tenant's purposes (none declared: no row), the locks and the stream's read, then the suppression
    # list's look-up (not suppressed: no row) sent with the count: the one write tried, whose answer (full: no
    # row) rolls the transaction back. No event, data key or projection row is ever sent to the server.
    assert wire.statements == ["SELECT 0", "SELECT 1", "SELECT 1", "SELECT 0", "INSERT 0 0", "ROLLBACK"]
    assert wire.transactions == 1 and wire.round_trips == 4


def test_a_refusal_is_logged_with_its_quota_and_user_and_never_the_address_or_ip(limited: ServiceContext) -> None:
    for _ in range(3):
        request_otp(limited, RequestOtp(new_user(), ADA), client_ip="198.51.100.66")
    with logged_lines("json") as lines:
        refusal(lambda: request_otp(limited, RequestOtp("u-victim", ADA), client_ip="198.51.100.66"))

    [line] = [json.loads(line) for line in lines() if '"limit reached"' in line]
    assert line["quota"] == "per-address-ip" and line["user_id"] == "u-victim"
    assert "198.51.100.66" not in str(lines()) and ADA not in str(lines())
