"""Reviewers read addresses in plain text, or [erased] after `privacy forget`, never an enc:v1: envelope.

The HTTP timeline, `history` and `explain` all ask the one lookup, so they
read the same: the address before the erasure, [erased] after it, while
another user's address stays readable and the log itself stays sealed.
"""

from __future__ import annotations

import logging
from uuid import UUID

import httpx
import pytest
from sqlalchemy import Engine, text

from domain.otp import RequestOtp
from domain.reset import RequestReset
from infra.clock import ManualClock
from infra.delivery.worker import Worker
from infra.eventlog.personal_data import ERASED, FieldContext, MemoryKeyring
from infra.review.lookup import WITHHELD, ReviewerKeyring
from infra.services.clients import create_client
from infra.services.otp import request_otp
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.http.support import asgi_client
from tests.support.cli import Env, run_cli
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log

ADA, BOB = "ada.lovelace@example.test", "bob.babbage@example.test"
SENDER = "authledger <no-reply@app.test>"
ENVELOPE = "enc:v1:"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def two_users(ctx: ServiceContext) -> dict[str, UUID]:
    """Ada asks for a reset link and a code, both delivered; Bob asks for a link."""
    reset = request_reset(ctx, RequestReset("1", ADA))
    challenge = request_otp(ctx, RequestOtp("1", ADA, purpose="login"))
    request_reset(ctx, RequestReset("2", BOB))
    Worker(ctx, RecordingMailer(), sender=SENDER).drain()
    return {"request": reset.request_id, "message": reset.message_id, "challenge": challenge.request_id}


async def http_answers(ctx: ServiceContext, ids: dict[str, UUID], client: str) -> str:
    """The HTTP timeline of Ada, of her reset request and of its email, as one text."""
    key = create_client(ctx, client).api_key
    async with asgi_client(ctx, key) as api:
        answers = [await api.get("/v1/timeline", params=params) for params in (
            {"user_id": "1"}, {"request_id": str(ids["request"])}, {"message_id": str(ids["message"])})]
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    return "\n".join(a.text for a in answers)


def cli_answers(env: Env, ids: dict[str, UUID]) -> str:
    """`history` and `explain` of Ada, her request and its email, as text and as JSON, as one text."""
    runs = [("history", "--user-id", "1"), ("explain", "--request-id", str(ids["request"])),
            ("explain", "--message-id", str(ids["message"])), ("explain", "--request-id", str(ids["challenge"]))]
    return "\n".join(run_cli(env, *run, *json_flag).output for run in runs for json_flag in ((), ("--json",)))


def recipients(timeline: httpx.Response) -> set[str]:
    return {e["payload"]["recipient"] for e in timeline.json()["events"] if "recipient" in e["payload"]}


@pytest.mark.anyio
async def test_timeline_history_and_explain_read_the_address_before_the_erasure_and_erased_after(
    ctx: ServiceContext, engine: Engine, clock: ManualClock, caplog: pytest.LogCaptureFixture, env: Env
) -> None:
    ids = two_users(ctx)
    caplog.set_level(logging.DEBUG)

    before = await http_answers(ctx, ids, "support-1") + cli_answers(env, ids)
    assert ADA in before and ENVELOPE not in before and ERASED not in before
    assert BOB not in before, "only the user asked about"
    assert f"reset link requested for {ADA}" in before and f"email queued (reset_link) to {ADA}" in before
    assert f"one-time code requested (login) for {ADA}" in before

    run_cli(env, "privacy", "forget", "--user-id", "1", "--reason", "ticket 4711", "--yes")

    after = await http_answers(ctx, ids, "support-2") + cli_answers(env, ids)
    assert ERASED in after and ADA not in after and ENVELOPE not in after
    assert f"reset link requested for {ERASED}" in after and f"email queued (reset_link) to {ERASED}" in after
    key = create_client(ctx, "support-bob").api_key
    async with asgi_client(ctx, key) as api:
        assert recipients(await api.get("/v1/timeline", params={"user_id": "2"})) == {BOB}, "Bob is untouched"
    with engine.connect() as connection:
        stored = connection.execute(text("SELECT payload::text FROM events")).scalars().all()
    assert not any(ADA in p or BOB in p for p in stored), "the log itself holds no address"
    assert ADA not in caplog.text and BOB not in caplog.text, "no address in the logs"
    assert_projections_match_log(engine)


@pytest.mark.anyio
async def test_the_timeline_shows_the_stored_payload_with_only_the_address_opened(
    ctx: ServiceContext, engine: Engine
) -> None:
    ids = two_users(ctx)
    key = create_client(ctx, "support").api_key
    async with asgi_client(ctx, key) as api:
        events = (await api.get("/v1/timeline", params={"request_id": str(ids["request"])})).json()["events"]
    with engine.connect() as connection:
        stored = dict(connection.execute(text("SELECT global_position, payload FROM events")).all())
    for event in events:
        sealed = stored[event["position"]]
        if "recipient" in sealed:
            assert sealed["recipient"].startswith(ENVELOPE)
            withheld = {field: "[withheld]" for field, value in sealed.items() if str(value).startswith(ENVELOPE)}
            assert event["payload"] == {**sealed, **withheld, "recipient": ADA}
        else:
            assert event["payload"] == sealed


def test_a_reviewer_reads_addresses_and_never_another_sealed_field() -> None:
    keys = MemoryKeyring()
    address, secret = FieldContext("1", "ResetRequested", "recipient"), FieldContext("1", "ResetRequested", "nonce")
    reviewer = ReviewerKeyring(keys)  # type: ignore[arg-type]  # any DataKeyring opens alike
    sealed = keys.seal(address, ADA)
    assert reviewer.open(address, sealed) == ADA
    assert reviewer.open(secret, keys.seal(secret, "a secret nonce")) == WITHHELD
    keys.forget("1")
    assert reviewer.open(address, sealed) == ERASED
