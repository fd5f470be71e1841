"""Every problem code the API documents is answered, through the real server, with its status and type.

A table: each code and how a caller provokes it. A few codes need a broken
database, a stalled socket or a crowd; the tests that provoke those name the
code too (``PROVOKED_ELSEWHERE``), so that between them every code of the
catalogue is reached.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta

import httpx
import pytest
from attrs import evolve, frozen
from sqlalchemy import Engine

from domain.errors import TenantUnknown
from infra.clock import ManualClock
from infra.http.app import create_app
from infra.http.codes import CATALOGUE, CODES
from infra.services.clients import create_client
from infra.services.locks import IdempotencyLock
from infra.services.tenants import require_tenant
from infra.services.unit_of_work import ServiceContext
from tests.http.support import assert_problem, code_for, token_for, wrong_code
from tests.support.servers import served

ADA = {"user_id": "42", "email": "ada@example.com"}
SECOND = timedelta(seconds=1)

# Codes whose provocation needs more than a request: each named with the test that provokes it and checks the code.
PROVOKED_ELSEWHERE = {
    "tenant_busy": "tests/http/test_fairness.py",
    "request_timeout": "tests/http/test_slow_clients.py",
    "internal_error": "tests/http/test_bad_requests.py::test_an_unexpected_failure_is_a_bare_500",
    "database_unavailable": "tests/http/test_bad_requests.py::test_an_unreachable_database_is_503_without_its_address",
    "schema_mismatch": "tests/http/test_operations.py",
    "read_only_standby": "tests/scenarios/test_failover.py",
    "address_suppressed": "tests/feedback/test_provider_endpoints.py",
    "concurrency_conflict": "tests/http/test_concurrent_users.py",
    "tenant_unknown": "here: test_a_tenant_only_the_command_line_names_is_tenant_unknown",
}


@frozen
class Caller:
    """A client of the served API (the "shop" key: send, verify, review), and what a test needs beside it."""

    http: httpx.Client
    ctx: ServiceContext
    engine: Engine
    clock: ManualClock
    keys: Iterator[int]

    def create_reset(self, body: dict[str, str] = ADA, key: str | None = None) -> httpx.Response:
        return self.http.post("/v1/password-resets", json=body,
                              headers={"Idempotency-Key": key or f"k-{next(self.keys)}"})

    def token(self) -> str:
        created = self.create_reset()
        assert created.status_code == 202, created.text
        return token_for(self.engine, created.json()["request_id"])

    def verify(self, token: str) -> httpx.Response:
        return self.http.post("/v1/password-resets/verify", json={"token": token})

    def consume(self, token: str) -> httpx.Response:
        return self.http.post("/v1/password-resets/consume", json={"token": token})

    def challenge(self, body: dict[str, str] = ADA) -> str:
        created = self.http.post("/v1/otp/challenges", json=body, headers={"Idempotency-Key": f"k-{next(self.keys)}"})
        assert created.status_code == 202, created.text
        return str(created.json()["challenge_id"])

    def check(self, challenge_id: str, code: str) -> httpx.Response:
        return self.http.post(f"/v1/otp/challenges/{challenge_id}/verify", json={"user_id": "42", "code": code})

    def right(self, challenge_id: str) -> str:
        return code_for(self.engine, challenge_id)

    def wrong(self, challenge_id: str) -> str:
        return wrong_code(self.engine, challenge_id)

    def after_the_cooldown(self) -> None:
        self.clock.advance(self.ctx.reset_policy.cooldown + SECOND)

    def admin(self) -> httpx.Client:
        key = create_client(self.ctx, "support-desk", scopes=["admin"]).api_key
        return httpx.Client(base_url=str(self.http.base_url), headers={"Authorization": f"Bearer {key}"})


def _expired_link(c: Caller) -> httpx.Response:
    token = c.token()
    c.clock.advance(c.ctx.reset_policy.ttl + SECOND)
    return c.verify(token)


def _used_link(c: Caller) -> httpx.Response:
    token = c.token()
    assert c.consume(token).status_code == 200
    return c.verify(token)


def _superseded_link(c: Caller) -> httpx.Response:
    first = c.token()
    c.after_the_cooldown()
    c.token()
    return c.verify(first)


def _erased_link(c: Caller) -> httpx.Response:
    token = c.token()
    with c.admin() as admin:
        assert admin.post("/v1/users/42/erasure", json={"reason": "asked to be forgotten"}).status_code == 200
    return c.verify(token)


def _invalidated_link(c: Caller) -> httpx.Response:
    token = c.token()
    with c.admin() as admin:
        assert admin.post("/v1/users/42/invalidation", json={"reason": "phished"}).status_code == 200
    return c.verify(token)


def _wrong_code(c: Caller) -> httpx.Response:
    challenge = c.challenge()
    return c.check(challenge, c.wrong(challenge))


def _expired_challenge(c: Caller) -> httpx.Response:
    challenge = c.challenge()
    c.clock.advance(c.ctx.otp_policy.ttl + SECOND)
    return c.check(challenge, c.right(challenge))


def _used_challenge(c: Caller) -> httpx.Response:
    challenge = c.challenge()
    assert c.check(challenge, c.right(challenge)).status_code == 200
    return c.check(challenge, c.right(challenge))


def _superseded_challenge(c: Caller) -> httpx.Response:
    first = c.challenge()
    c.after_the_cooldown()
    c.challenge()
    return c.check(first, c.right(first))


def _locked_challenge(c: Caller) -> httpx.Response:
    challenge = c.challenge()
    for _ in range(c.ctx.otp_policy.max_attempts):
        assert c.check(challenge, c.wrong(challenge)).status_code == 400
    return c.check(challenge, c.right(challenge))


def _invalidated_challenge(c: Caller) -> httpx.Response:
    challenge = c.challenge()
    with c.admin() as admin:
        assert admin.post("/v1/users/42/invalidation", json={"reason": "phished"}).status_code == 200
    return c.check(challenge, c.right(challenge))


def _locked_account(c: Caller) -> httpx.Response:
    # The server's account lock comes one wrong code after a challenge's (ACCOUNT_LOCK_THRESHOLD).
    first = c.challenge()
    for _ in range(c.ctx.otp_policy.max_attempts):
        c.check(first, c.wrong(first))
    c.after_the_cooldown()
    second = c.challenge()
    assert c.check(second, c.wrong(second)).status_code == 400  # the one that locks the account
    return c.check(second, c.right(second))


def _rate_limited(c: Caller) -> httpx.Response:
    for _ in range(c.ctx.reset_policy.hourly_limit):
        assert c.create_reset().status_code == 202
        c.after_the_cooldown()
    return c.create_reset()


def _mismatched_key(c: Caller) -> httpx.Response:
    assert c.create_reset(key="same").status_code == 202
    return c.create_reset({**ADA, "email": "bob@example.com"}, key="same")


def _in_flight(c: Caller) -> httpx.Response:
    lock = IdempotencyLock.for_request("reset", "shop", "42", "held", "wait")
    assert lock is not None
    with c.engine.begin() as connection:
        lock.take(connection)  # a first request with this key still running
        return c.create_reset(key="held")


def _raw(body: bytes, content_type: str = "application/json") -> Callable[[Caller], httpx.Response]:
    return lambda c: c.http.post("/v1/password-resets", content=body,
                                 headers={"Content-Type": content_type, "Idempotency-Key": "raw"})


CASES: dict[str, Callable[[Caller], httpx.Response]] = {
    "token_unknown": lambda c: c.verify("A" * 43),
    "token_expired": _expired_link,
    "token_used": _used_link,
    "token_superseded": _superseded_link,
    "token_invalidated": _invalidated_link,
    "challenge_unknown": lambda c: c.check(str(uuid.UUID(int=7)), "123456"),
    "code_wrong": _wrong_code,
    "challenge_expired": _expired_challenge,
    "challenge_used": _used_challenge,
    "challenge_superseded": _superseded_challenge,
    "challenge_locked": _locked_challenge,
    "challenge_invalidated": _invalidated_challenge,
    "account_locked": _locked_account,
    "rate_limited": _rate_limited,
    "invalid_input": lambda c: c.check(c.challenge(), "12345"),  # a code of another length than the challenge's
    "malformed_json": _raw(b'{"user_id": '),
    "invalid_body": lambda c: c.create_reset({**ADA, "extra": "field"}),
    "address_invalid": lambda c: c.create_reset({**ADA, "email": "Ada <ada@example.com>"}),
    "user_id_refused": lambda c: c.create_reset({**ADA, "user_id": "ada@example.com"}),
    "purpose_unknown": lambda c: c.http.post("/v1/otp/challenges", json={**ADA, "purpose": "nothing_declared"},
                                             headers={"Idempotency-Key": "p"}),
    "invalid_query": lambda c: c.http.get("/v1/timeline"),
    "idempotency_key_missing": lambda c: c.http.post("/v1/password-resets", json=ADA),
    "idempotency_key_invalid": lambda c: c.create_reset(key="two words"),
    "request_id_invalid": lambda c: c.http.get("/v1/timeline?user_id=42", headers={"X-Request-Id": "no spaces"}),
    "idempotency_key_mismatch": _mismatched_key,
    "idempotency_key_in_flight": _in_flight,
    "unauthorized": lambda c: httpx.post(c.http.base_url.join("/v1/password-resets/verify"), json={"token": "A" * 43}),
    "forbidden": lambda c: c.http.post("/v1/users/42/erasure", json={"reason": "asked to be forgotten"}),
    "not_found": lambda c: c.http.get("/v1/nothing-here"),
    "method_not_allowed": lambda c: c.http.get("/v1/password-resets"),
    "body_too_large": _raw(b'{"user_id": "' + b"4" * 20_000 + b'"}'),
    "unsupported_media_type": _raw(b"user_id=42", "application/x-www-form-urlencoded"),
}
LISTED = {entry.code.name: entry for entry in CATALOGUE}


@pytest.fixture
def caller(ctx: ServiceContext, engine: Engine, clock: ManualClock, api_key: str) -> Iterator[Caller]:
    """The real server (uvicorn) over this test's database; its account lock one wrong code past a challenge's."""
    served_ctx = evolve(ctx, otp_policy=evolve(ctx.otp_policy, account_lock_threshold=ctx.otp_policy.max_attempts + 1))
    with served(create_app(served_ctx)) as base, httpx.Client(
        base_url=base, headers={"Authorization": f"Bearer {api_key}"}
    ) as http:
        yield Caller(http, served_ctx, engine, clock, itertools.count())


def test_every_code_of_the_catalogue_is_provoked_here_or_by_a_named_test() -> None:
    assert set(CASES) | set(PROVOKED_ELSEWHERE) == set(CODES)
    assert not set(CASES) & set(PROVOKED_ELSEWHERE)


@pytest.mark.parametrize("code", list(CASES))
def test_a_refusal_carries_its_code_beside_its_status_and_type(caller: Caller, code: str) -> None:
    entry = LISTED[code]
    assert_problem(CASES[code](caller), entry.status, entry.problem_type, code)


def test_an_erased_link_is_answered_exactly_as_one_never_issued(caller: Caller) -> None:
    erased, unknown = _erased_link(caller), caller.verify("B" * 43)

    assert_problem(erased, 400, "token-invalid", "token_unknown")
    assert erased.content == unknown.content, "erasure leaves nothing to tell"


def test_an_unknown_challenge_and_another_users_are_answered_alike(caller: Caller) -> None:
    others = caller.challenge({**ADA, "user_id": "43"})
    unknown = caller.check(str(uuid.UUID(int=9)), "123456")
    another_users = caller.check(others, caller.right(others))

    assert_problem(another_users, 400, "code-rejected", "challenge_unknown")
    assert another_users.content == unknown.content


def test_a_tenant_only_the_command_line_names_is_tenant_unknown(engine: Engine) -> None:
    with pytest.raises(TenantUnknown) as refused:
        require_tenant(engine, "nosuch")
    assert (refused.value.code, refused.value.http_status) == ("tenant_unknown", LISTED["tenant_unknown"].status)
