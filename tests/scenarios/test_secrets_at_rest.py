"""No code, no token and no nonce at rest: not in a dump of the database, not in the logs.

Each test runs a whole flow (request, deliver, use) with every log line of
authledger captured through its real formatter, then dumps the test
database with pg_dump and searches both for the secret the email carried
and for the request's nonce (known to the test: it hands the service its
nonce generator), which is stored only sealed under the user's data key.
The last test does the same after two tenants' flows over a real server:
rotation and client creation over HTTP, a support invalidation, an admin erasure, rejected
presentations, and codes bound to a purpose; it also looks for every API
key and every address.
"""

from __future__ import annotations

import base64
import io
import logging
from collections.abc import Callable, Iterator
from urllib.parse import parse_qs, urlsplit

import attrs
import pytest
from sqlalchemy import Engine

from domain.errors import CodeRejected, TokenInvalid
from domain.otp import RequestOtp
from domain.policy import OtpPolicy
from domain.reset import RequestReset
from infra.logs import configure_logging
from infra.services.otp import request_otp, verify_code
from infra.services.reset import consume_token, request_reset, verify_token
from infra.services.unit_of_work import ServiceContext, random_nonce
from infra.delivery.worker import Worker
from infra.services.webhooks import add_endpoint, rotate_endpoint
from tests.support.dumps import dump
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log
from tests.support.two_tenants import two_tenants
from tests.support.webhook_receiver import running_receiver

SENDER = "authledger <no-reply@app.test>"


@pytest.fixture
def logs() -> Iterator[Callable[[], str]]:
    """Everything authledger logs from here on (JSON lines, every level), as its handler writes it."""
    logger = logging.getLogger("authledger")
    saved = logger.handlers[:], logger.level, logger.propagate
    configure_logging("json", level=logging.DEBUG)
    written = io.StringIO()
    [handler] = logger.handlers
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(written)  # the real handler and formatter, into a buffer instead of stderr
    yield written.getvalue
    logger.handlers[:], logger.level, logger.propagate = saved


def test_a_dump_and_the_logs_after_a_whole_otp_flow_hold_no_code(
    ctx: ServiceContext, engine: Engine, database_url: str, logs: Callable[[], str]
) -> None:
    # Ten digits: a six-digit code could turn up by chance among the digits
    # of timestamps and ids in the dump, and the test would fail for nothing.
    nonce = random_nonce()
    ctx = attrs.evolve(ctx, otp_policy=OtpPolicy(digits=10), new_nonce=lambda: nonce)
    challenge = request_otp(ctx, RequestOtp("42", "ada@example.test", purpose="login"))
    mailer = RecordingMailer()
    assert Worker(ctx, mailer, sender=SENDER).drain() == {"sent": 1}
    code = next(line for line in mailer.emails[0].text_body.splitlines() if line.strip().isdigit()).strip()
    assert len(code) == 10
    with pytest.raises(CodeRejected):
        verify_code(ctx, challenge.request_id, str((int(code) + 1) % 10**10).zfill(10), user_id="42")
    assert verify_code(ctx, challenge.request_id, code, user_id="42").verified

    logged, dumped = logs(), dump(database_url)
    assert str(challenge.request_id) in logged and str(challenge.request_id) in dumped, "both were captured"
    assert "OtpChallengeVerified" in dumped
    assert code not in dumped
    assert code not in logged
    assert nonce not in dumped and nonce not in logged
    assert_projections_match_log(engine)


def test_a_dump_and_the_logs_after_a_whole_reset_flow_hold_no_token(
    ctx: ServiceContext, engine: Engine, database_url: str, logs: Callable[[], str]
) -> None:
    nonce = random_nonce()
    ctx = attrs.evolve(ctx, new_nonce=lambda: nonce)
    request = request_reset(ctx, RequestReset("42", "ada@example.test", idempotency_key="r-1", client="app"))
    mailer = RecordingMailer()
    assert Worker(ctx, mailer, sender=SENDER).drain() == {"sent": 1}
    link = next(line for line in mailer.emails[0].text_body.splitlines() if line.startswith("https://app.test/"))
    token = parse_qs(urlsplit(link).query)["token"][0]
    assert verify_token(ctx, token).request_id == request.request_id
    consume_token(ctx, token)
    assert Worker(ctx, mailer, sender=SENDER).drain() == {"sent": 1}, "the password-changed notice"

    logged, dumped = logs(), dump(database_url)

    assert str(request.request_id) in logged and str(request.request_id) in dumped, "both were captured"
    assert "ResetCompleted" in dumped
    assert token not in dumped
    assert token not in logged
    assert nonce not in dumped and nonce not in logged
    with pytest.raises(TokenInvalid):  # presented again after use: recorded, still nothing secret at rest
        consume_token(ctx, token)
    assert "ResetTokenRejected" in dump(database_url) and token not in dump(database_url)
    assert_projections_match_log(engine)


def test_a_dump_and_the_logs_after_two_tenants_flows_over_a_real_server_hold_no_secret_and_no_address(
    ctx: ServiceContext, engine: Engine, database_url: str, logs: Callable[[], str]
) -> None:
    with two_tenants(ctx) as world:
        acme, shop = world.acme, world.shop
        _, used = world.request_reset(acme, "42", "ada@acme.example")
        world.request_reset(shop, "42", "bob@shop.example")  # same user id, other tenant
        challenge, code = world.request_code(acme, "42", "ada@acme.example", "mfa")
        _, outstanding = world.request_reset(acme, "7", "cy@acme.example")
        world.request_code(acme, "7", "cy@acme.example", "login")
        world.request_code(shop, "8", "dee@shop.example", "verify_email")
        verify_path = f"/v1/otp/challenges/{challenge['challenge_id']}/verify"

        assert world.call(shop, "verify", "POST", "/v1/password-resets/verify", {"token": used}).status_code == 400
        assert world.call(acme, "verify", "POST", "/v1/password-resets/consume", {"token": used}).status_code == 200
        rejected = world.call(acme, "verify", "POST", "/v1/password-resets/consume", {"token": used})
        assert rejected.status_code == 400, "presented again after use: a rejected presentation"
        assert world.call(acme, "verify", "POST", verify_path,
                          {"code": code, "user_id": "42", "purpose": "login"}).status_code == 400, "wrong purpose"
        assert world.call(acme, "verify", "POST", verify_path,
                          {"code": code, "user_id": "42", "purpose": "mfa"}).status_code == 200
        assert world.call(acme, "verify", "POST", verify_path,
                          {"code": code, "user_id": "42", "purpose": "mfa"}).status_code == 400, "used: rejected"
        # An admin key grants only scopes it holds: here, admin.
        rotated = world.call(acme, "admin", "POST", "/v1/admin/clients/acme-admin/rotate")
        made = world.call(shop, "admin", "POST", "/v1/admin/clients", {"name": "shop-ops", "scopes": ["admin"]})
        assert rotated.status_code == made.status_code == 201
        world.api_keys += [rotated.json()["api_key"], made.json()["api_key"]]
        withdrawn = world.call(shop, "admin", "POST", "/v1/users/8/invalidation", {"reason": "ticket 2026-15"})
        assert withdrawn.status_code == 200 and withdrawn.json()["invalidated_codes"] == 1, withdrawn.text
        erased = world.call(acme, "admin", "POST", "/v1/users/7/erasure", {"reason": "GDPR request 2026-14"})
        assert erased.status_code == 200, erased.text
        assert world.call(acme, "verify", "POST", "/v1/password-resets/verify", {"token": outstanding}
                          ).status_code == 400, "erased: the outstanding link is dead"
        for tenant in (acme, shop):
            assert world.call(tenant, "review", "GET", "/v1/timeline", user_id="42").status_code == 200
            assert world.call(tenant, "metrics", "GET", "/metrics").status_code == 200

    logged, dumped = logs(), dump(database_url)
    assert "ResetTokenRejected" in dumped and "SubjectErased" in dumped and "ClientKeyIssued" in dumped
    assert "OtpChallengeInvalidated" in dumped
    assert "http request" in logged and "/v1/users/7/erasure" in logged, "the server's lines were captured"
    secrets = {"token": world.tokens, "code": world.codes, "nonce": world.nonces,
               "api key": world.api_keys, "address": world.addresses}
    assert all(secrets.values()) and len(world.nonces) == len(world.tokens) + len(world.codes)
    for kind, values in secrets.items():
        for value in values:
            assert value not in dumped, f"a {kind} in the dump"
            assert value not in logged, f"a {kind} in the logs"
    assert_projections_match_log(engine)


def test_a_dump_and_the_logs_after_webhooks_were_added_rotated_and_delivered_hold_no_webhook_secret(
    ctx: ServiceContext, engine: Engine, database_url: str, logs: Callable[[], str]
) -> None:
    with running_receiver() as receiver:
        first = add_endpoint(ctx, "default", receiver.url)
        second = rotate_endpoint(ctx, "default", first.endpoint_id)
        request_reset(ctx, RequestReset("ada", "ada@example.test"))
        Worker(ctx, RecordingMailer(), sender=SENDER).drain()
        assert receiver.accepted(), "delivered, so the secrets were opened and used"

    dumped, logged = dump(database_url), logs()
    for secret in (first.secret, second.secret):
        raw = base64.b64decode(secret.removeprefix("whsec_"))
        forms = {secret, secret.removeprefix("whsec_"), raw.hex(), base64.urlsafe_b64encode(raw).decode()}
        for form in forms:
            assert form not in dumped and form not in logged
