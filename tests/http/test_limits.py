"""The limits beyond the user through the real server: two tenants, one address, an attacker's IP, the
worker's emails."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import attrs
import httpx
import pytest

from domain.send_limits import SendLimits
from infra.clock import ManualClock
from infra.services.unit_of_work import ServiceContext
from tests.http.support import assert_problem
from tests.support.two_tenants import TwoTenants, events_digest, two_tenants

# Ten past an hour, and the clock stands still: no test crosses into the next window.
START = datetime(2026, 3, 1, 10, 10, tzinfo=UTC)
VICTIM = "victim@example.test"


@pytest.fixture
def world(ctx: ServiceContext) -> Iterator[TwoTenants]:
    """acme and shop on a real server, with the default send limits."""
    with two_tenants(attrs.evolve(ctx, send_limits=SendLimits(), clock=ManualClock(START))) as world:
        yield world


def create(world: TwoTenants, tenant_name: str, user_id: str, email: str, **extra: str) -> httpx.Response:
    tenant = world.acme if tenant_name == "acme" else world.shop
    return world.call(tenant, "send", "POST", "/v1/otp/challenges",
                      {"user_id": user_id, "email": email, "purpose": "login", **extra})


def assert_limited(response: httpx.Response, quota: str, count: int) -> None:
    """A 429 ``rate-limited`` problem naming ``quota`` in the IETF headers, with Retry-After to the window's end."""
    assert_problem(response, 429, "rate-limited")
    assert response.headers["Retry-After"] == "3000", "fifty minutes to the end of the hour"
    assert response.headers["RateLimit-Policy"] == f'"{quota}";q={count};w=3600'
    assert response.headers["RateLimit"] == f'"{quota}";r=0;t=3000'
    assert VICTIM not in response.text


def test_forty_made_up_users_at_one_address_deliver_six_emails_and_the_rest_answer_429(world: TwoTenants) -> None:
    answers = [create(world, "acme", f"signup-{n}", VICTIM) for n in range(40)]

    assert [a.status_code for a in answers] == [202] * 6 + [429] * 34
    for refused in answers[6:]:
        assert_limited(refused, "per-address", 6)
    world.deliver()
    assert len(world.mailer.sent_to(VICTIM)) == 6


def test_another_tenants_flood_leaves_the_address_its_allowance_here(world: TwoTenants) -> None:
    # The issue asks for the limit per address within a tenant: each tenant is its own sender to the person.
    for n in range(10):
        create(world, "acme", f"signup-{n}", VICTIM)
    assert create(world, "acme", "signup-x", VICTIM).status_code == 429

    own = create(world, "shop", "u1", VICTIM)

    assert own.status_code == 202, own.text
    world.deliver()
    assert str(own.json()["message_id"]) in {str(e.message_id) for e in world.mailer.sent_to(VICTIM)}
    assert len(world.mailer.sent_to(VICTIM)) == 7


def test_an_attackers_flood_from_one_ip_cannot_lock_the_user_out(world: TwoTenants) -> None:
    flood = [create(world, "acme", "ada", f"mallory{n}@example.test", client_ip="198.51.100.66")
             for n in range(30)]
    assert [a.status_code for a in flood] == [202] * 3 + [429] * 27
    assert_limited(flood[-1], "per-user-ip", 3)

    own = create(world, "acme", "ada", VICTIM, client_ip="203.0.113.7")

    assert own.status_code == 202, own.text
    assert own.json()["reused"] is False
    world.deliver()
    assert [str(e.message_id) for e in world.mailer.sent_to(VICTIM)] == [own.json()["message_id"]]


@pytest.mark.parametrize("path", ["/v1/otp/challenges", "/v1/password-resets"])
@pytest.mark.parametrize("bad", ["203.0.113.7:443", "localhost", "fe80::1%eth0", "::ffff:1.2.3.4.5", "", 7])
def test_a_client_ip_that_is_no_ip_is_a_400_and_writes_nothing(world: TwoTenants, path: str, bad: object) -> None:
    before = events_digest(world.ctx.engine)

    response = world.call(world.acme, "send", "POST", path, {"user_id": "ada", "email": VICTIM, "client_ip": bad})

    problem = assert_problem(response, 400, "invalid-body")
    assert [e["pointer"] for e in problem["errors"]] == ["/client_ip"]
    assert events_digest(world.ctx.engine) == before


def test_the_checks_take_a_client_ip_too(world: TwoTenants) -> None:
    _, token = world.request_reset(world.acme, "ada", VICTIM)
    body = {"token": token, "client_ip": "2001:db8::7"}

    verified = world.call(world.acme, "verify", "POST", "/v1/password-resets/verify", body)
    assert verified.status_code == 200, verified.text
    bad = world.call(world.acme, "verify", "POST", "/v1/password-resets/consume", {**body, "client_ip": "::1::"})
    assert_problem(bad, 400, "invalid-body")
    consumed = world.call(world.acme, "verify", "POST", "/v1/password-resets/consume", body)
    assert consumed.status_code == 200, consumed.text


def test_the_users_own_hourly_limit_names_its_quota_too(world: TwoTenants) -> None:
    answers = [create(world, "acme", "ada", f"ada{n}@example.test") for n in range(6)]

    assert [a.status_code for a in answers] == [202] * 5 + [429]
    assert_problem(answers[-1], 429, "rate-limited")
    assert answers[-1].headers["RateLimit-Policy"] == '"per-user";q=5;w=3600'
    assert answers[-1].headers["RateLimit"] == '"per-user";r=0;t=3600'


def test_an_ip_past_its_checks_gets_a_429_naming_the_quota_and_the_code_stays_usable(ctx: ServiceContext) -> None:
    limited = attrs.evolve(ctx, send_limits=SendLimits(verifies_per_ip=1), clock=ManualClock(START))
    with two_tenants(limited) as world:
        created, code = world.request_code(world.acme, "ada", VICTIM, "login")
        path = f"/v1/otp/challenges/{created['challenge_id']}/verify"
        body = {"user_id": "ada", "code": code, "client_ip": "198.51.100.66"}
        wrong = str((int(code) + 1) % 10 ** len(code)).zfill(len(code))
        assert world.call(world.acme, "verify", "POST", path, {**body, "code": wrong}).status_code == 400
        before = events_digest(world.ctx.engine)

        refused = world.call(world.acme, "verify", "POST", path, body)

        assert_problem(refused, 429, "rate-limited")
        assert refused.headers["RateLimit-Policy"] == '"verify-ip";q=1;w=3600'
        assert events_digest(world.ctx.engine) == before
        verified = world.call(world.acme, "verify", "POST", path, {**body, "client_ip": "203.0.113.7"})
        assert verified.status_code == 200, verified.text
