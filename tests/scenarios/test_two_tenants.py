"""Two tenants on one real server (uvicorn, a real socket): neither sees nor touches the other's users.

acme and shop each hold a send, verify, review, admin and metrics key, and
both serve a user "42". Every attempt of shop's keys on acme's requests,
messages, users and clients is answered exactly as the same attempt on an id
nobody ever made (same status, same body but for the id), and leaves the
`events` table byte for byte as it was. Every scope is refused outside its
own operations, walked from the OpenAPI document the server publishes. An
erased user's outstanding link and code stop working, and a reviewer reads
`[erased]` where the address was.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable

import httpx
import pytest
from sqlalchemy import Engine

from domain.clients import TENANT_SCOPES
from infra.eventlog.personal_data import ERASED
from infra.services.unit_of_work import ServiceContext
from tests.support.replay import assert_projections_match_log
from tests.support.two_tenants import Tenant, TwoTenants, events_digest, two_tenants, unknown_id

pytestmark = pytest.mark.slow
ACME_ONLY = "cy-of-acme"  # a user only acme has (and an id that appears nowhere else in a body)
RESET_VERIFY, RESET_CONSUME = "/v1/password-resets/verify", "/v1/password-resets/consume"

# Each operation of the OpenAPI document, with the one scope it needs (None: open to anyone), the
# values of its path parameters and its body. A route added to the document without a line here
# fails the walk, so no route escapes the scope check.
SOME_ID = "123e4567-e89b-12d3-a456-426614174000"
VENDOR = "the provider's own proof"
OPERATIONS: dict[str, tuple[str | None, dict[str, str], object | None]] = {
    "createPasswordReset": ("send", {}, {"user_id": "walker", "email": "walker@acme.example"}),
    "createOtpChallenge": ("send", {}, {"user_id": "walker", "email": "walker@acme.example"}),
    "verifyPasswordReset": ("verify", {}, {"token": "no-such-token"}),
    "consumePasswordReset": ("verify", {}, {"token": "no-such-token"}),
    "verifyOtpChallenge": ("verify", {"challenge_id": SOME_ID}, {"code": "0123456789", "user_id": "walker"}),
    "getTimeline": ("review", {}, None),
    "listClients": ("admin", {}, None),
    "createClient": ("admin", {}, {"name": "acme-walked", "scopes": ["admin"]}),  # a scope the admin key holds
    "rotateClient": ("admin", {"name": "nobody"}, None),
    "revokeClient": ("admin", {"name": "nobody"}, {}),
    "redriveMessage": ("admin", {"message_id": SOME_ID}, {"reason": "relay fixed"}),
    "eraseUser": ("admin", {"user_id": "nobody"}, {"reason": "walking the routes"}),
    "invalidateUser": ("admin", {"user_id": "nobody"}, {"reason": "walking the routes"}),
    "resendToUser": ("admin", {"user_id": "nobody"}, {"flow": "reset", "reason": "walking the routes"}),
    "getTenant": ("admin", {}, None),
    "configureTenant": ("admin", {}, {"product_name": "Walked", "reason": "walking the routes"}),
    "listWebhooks": ("admin", {}, None),
    "addWebhook": ("admin", {}, {"url": "https://hooks.acme.example/walked"}),
    "rotateWebhook": ("admin", {"endpoint_id": "ep_" + "0" * 32}, None),
    "removeWebhook": ("admin", {"endpoint_id": "ep_" + "0" * 32}, None),
    "listSuppressions": ("admin", {}, None),
    "liftSuppression": ("admin", {}, {"email": "walker@acme.example", "reason": "walking the routes"}),
    "reportProviderEvent": ("provider-events", {}, {"message_id": SOME_ID, "type": "delivered"}),
    # Proven by the provider's own credentials, which no API key is: every caller here is refused.
    "postmarkWebhook": (VENDOR, {}, {"RecordType": "Delivery", "MessageID": "x"}),
    "sendgridWebhook": (VENDOR, {}, [{"event": "delivered", "sg_message_id": "x"}]),
    "metrics": ("metrics", {}, None),
    "ready": ("metrics", {}, None),  # open without a key; a key must hold metrics
    "health": (None, {}, None),
    "openapi": (None, {}, None),
}
QUERIES = {"getTimeline": {"user_id": "walker"}}


def answered_alike(theirs: httpx.Response, their_id: str, nobodys: httpx.Response, no_id: str) -> None:
    """The same status, media type and body, once each names its own id as ``<id>``."""
    assert (theirs.status_code, theirs.headers["content-type"]) == (
        nobodys.status_code, nobodys.headers["content-type"]), (theirs.text, nobodys.text)
    assert json.loads(theirs.text.replace(their_id, "<id>")) == json.loads(nobodys.text.replace(no_id, "<id>"))


def a_token_nobody_was_sent(like: str) -> str:
    return secrets.token_urlsafe(64)[: len(like)]


def test_every_attempt_of_one_tenant_on_anothers_users_is_answered_as_about_nothing_and_writes_nothing(
    ctx: ServiceContext, engine: Engine
) -> None:
    with two_tenants(ctx) as world:
        acme, shop = world.acme, world.shop
        acme_reset, acme_token = world.request_reset(acme, "42", "ada@acme.example")
        acme_challenge, acme_code = world.request_code(acme, "42", "ada@acme.example", "login")
        world.request_reset(acme, ACME_ONLY, "cy@acme.example")
        shop_reset, shop_token = world.request_reset(shop, "42", "bob@shop.example")
        shop_challenge, shop_code = world.request_code(shop, "42", "bob@shop.example", "login")

        # shop's requests for its user 42 replaced nothing of acme's user 42
        assert not shop_reset["reused"] and not shop_challenge["reused"]
        assert_verifies(world, acme, acme_token, acme_reset["request_id"])

        before = events_digest(engine)
        for their_id, nobodys_id, attempt in cross_tenant_attempts(world, shop, acme_reset, acme_challenge):
            answered_alike(attempt(their_id), their_id, attempt(nobodys_id), nobodys_id)
        for path in (RESET_VERIFY, RESET_CONSUME):
            fake = a_token_nobody_was_sent(acme_token)
            theirs = world.call(shop, "verify", "POST", path, {"token": acme_token})
            answered_alike(theirs, acme_token, world.call(shop, "verify", "POST", path, {"token": fake}), fake)
            assert theirs.status_code == 400 and theirs.json()["type"].endswith("token-invalid")
        challenge_id, nobodys = acme_challenge["challenge_id"], unknown_id()
        wrong = str((int(acme_code) + 1) % 10**len(acme_code)).zfill(len(acme_code))
        guesses = [{"code": wrong, "user_id": "42"}] * 6  # more than the challenge's five attempts
        for body in [{"code": acme_code, "user_id": "42"}, {"code": acme_code, "user_id": "42", "purpose": "login"},
                     *guesses]:
            theirs = world.call(shop, "verify", "POST", f"/v1/otp/challenges/{challenge_id}/verify", body)
            answered_alike(theirs, challenge_id,
                           world.call(shop, "verify", "POST", f"/v1/otp/challenges/{nobodys}/verify", body), nobodys)
            assert theirs.status_code != 200
        shop_view = world.call(shop, "review", "GET", "/v1/timeline", user_id="42")
        assert shop_view.status_code == 200 and shop_reset["request_id"] in shop_view.text
        for acme_thing in (acme_reset["request_id"], acme_reset["message_id"], acme_challenge["challenge_id"],
                           "ada@acme.example", "acme"):
            assert acme_thing not in shop_view.text
        listed = world.call(shop, "admin", "GET", "/v1/admin/clients").json()["keys"]
        assert {key["tenant"] for key in listed} == {"shop"}
        assert events_digest(engine) == before, "a refused attempt wrote to the log"

        # and each tenant's own keys still work on its own user: shop's guesses spent none of acme's attempts
        assert_verifies(world, shop, shop_token, shop_reset["request_id"])
        assert world.call(acme, "verify", "POST", f"/v1/otp/challenges/{challenge_id}/verify",
                          {"code": acme_code, "user_id": "42", "purpose": "login"}).status_code == 200
        assert world.call(shop, "verify", "POST", f"/v1/otp/challenges/{shop_challenge['challenge_id']}/verify",
                          {"code": shop_code, "user_id": "42", "purpose": "login"}).status_code == 200
        consumed = world.call(acme, "verify", "POST", RESET_CONSUME, {"token": acme_token})
        assert consumed.status_code == 200 and consumed.json()["user_id"] == "42"
    assert_projections_match_log(engine)


def assert_verifies(world: TwoTenants, tenant: Tenant, token: str, request_id: str) -> None:
    verified = world.call(tenant, "verify", "POST", RESET_VERIFY, {"token": token})
    assert verified.status_code == 200, verified.text
    assert verified.json()["request_id"] == request_id and verified.json()["user_id"] == "42"


def cross_tenant_attempts(
    world: TwoTenants, shop: Tenant, acme_reset: dict[str, str], acme_challenge: dict[str, str]
) -> list[tuple[str, str, Callable[[str], httpx.Response]]]:
    """(acme's id, an id nobody made, shop's attempt on an id) for every keyed operation that names one."""
    def timeline(name: str) -> Callable[[str], httpx.Response]:
        return lambda value: world.call(shop, "review", "GET", "/v1/timeline", **{name: value})

    def admin(method: str, path: str, body: object | None = None) -> Callable[[str], httpx.Response]:
        return lambda value: world.call(shop, "admin", method, path.format(value), body)

    return [
        (acme_reset["request_id"], unknown_id(), timeline("request_id")),
        (acme_challenge["challenge_id"], unknown_id(), timeline("request_id")),
        (acme_reset["message_id"], unknown_id(), timeline("message_id")),
        (acme_challenge["message_id"], unknown_id(), timeline("message_id")),
        (ACME_ONLY, "nobody-" + secrets.token_hex(4), timeline("user_id")),
        (acme_reset["message_id"], unknown_id(), admin("POST", "/v1/admin/messages/{}/redrive",
                                                       {"reason": "relay fixed"})),
        (ACME_ONLY, "nobody-" + secrets.token_hex(4), admin("POST", "/v1/users/{}/erasure",
                                                            {"reason": "asked to"})),
        (ACME_ONLY, "nobody-" + secrets.token_hex(4), admin("POST", "/v1/users/{}/invalidation",
                                                            {"reason": "asked to"})),
        (ACME_ONLY, "nobody-" + secrets.token_hex(4), admin("POST", "/v1/users/{}/resend",
                                                            {"flow": "otp", "reason": "asked to"})),
        ("acme-send", "nobody-send", admin("POST", "/v1/admin/clients/{}/rotate")),
        ("acme-send", "nobody-send", admin("POST", "/v1/admin/clients/{}/revoke", {})),
        ("acme-admin", "nobody-admin", admin("POST", "/v1/admin/clients/{}/revoke", {})),
    ]


def test_every_scope_is_refused_outside_its_own_operations_as_the_published_document_lists_them(
    ctx: ServiceContext, engine: Engine
) -> None:
    with two_tenants(ctx) as world:
        document = world.call(None, None, "GET", "/openapi.json").json()
        operations = {operation["operationId"]: (method.upper(), path)
                      for path, methods in document["paths"].items() for method, operation in methods.items()}
        assert set(operations) == set(OPERATIONS), "a new operation needs its scope in OPERATIONS"
        for operation_id, (method, path) in operations.items():
            needed, parameters, body = OPERATIONS[operation_id]
            path = path.format(**parameters)
            query = QUERIES.get(operation_id, {})
            anonymous = world.call(None, None, method, path, body, **query)
            if needed == VENDOR:
                assert anonymous.status_code == 401, (operation_id, anonymous.text)
                for scope in TENANT_SCOPES:
                    before = events_digest(engine)
                    assert world.call(world.acme, scope, method, path, body).status_code == 401, (operation_id, scope)
                    assert events_digest(engine) == before, (operation_id, scope)
                continue
            if needed is None or operation_id == "ready":
                assert anonymous.status_code == 200, (operation_id, anonymous.text)
            else:
                assert anonymous.status_code == 401, (operation_id, anonymous.text)
            for scope in TENANT_SCOPES:
                before = events_digest(engine)
                response = world.call(world.acme, scope, method, path, body, **query)
                if needed is None or needed == scope:
                    assert response.status_code not in (401, 403), (operation_id, scope, response.text)
                else:
                    assert response.status_code == 403, (operation_id, scope, response.text)
                    assert response.json()["type"] == "urn:authledger:problem:forbidden"
                    assert events_digest(engine) == before, (operation_id, scope)
        assert world.call(None, None, "GET", "/healthz").json() == {"status": "ok"}
    assert_projections_match_log(engine)


def test_an_erased_users_outstanding_link_and_code_stop_working_and_reviewers_read_erased(
    ctx: ServiceContext, engine: Engine
) -> None:
    with two_tenants(ctx) as world:
        acme, shop = world.acme, world.shop
        reset, token = world.request_reset(acme, "42", "ada@acme.example")
        challenge, code = world.request_code(acme, "42", "ada@acme.example", "mfa")
        shop_reset, shop_token = world.request_reset(shop, "42", "bob@shop.example")
        seen = world.call(acme, "review", "GET", "/v1/timeline", user_id="42")
        assert "ada@acme.example" in seen.text and "enc:v1:" not in seen.text, "a reviewer reads plain addresses"

        erased = world.call(acme, "admin", "POST", "/v1/users/42/erasure", {"reason": "GDPR request 2026-14"})

        assert erased.status_code == 200 and erased.json()["user_id"] == "42", erased.text
        verify = world.call(acme, "verify", "POST", RESET_VERIFY, {"token": token})
        assert verify.status_code == 400 and verify.json()["type"].endswith("token-invalid")
        code_check = world.call(acme, "verify", "POST", f"/v1/otp/challenges/{challenge['challenge_id']}/verify",
                                {"code": code, "user_id": "42", "purpose": "mfa"})
        assert code_check.status_code != 200 and code_check.json()["type"].endswith("code-rejected")
        timeline = world.call(acme, "review", "GET", "/v1/timeline", user_id="42")
        assert timeline.status_code == 200 and reset["request_id"] in timeline.text
        assert ERASED in timeline.text and "ada@acme.example" not in timeline.text and "enc:v1:" not in timeline.text
        # shop's user 42 is another person: untouched
        assert_verifies(world, shop, shop_token, shop_reset["request_id"])
    assert_projections_match_log(engine)
