"""Many requests for one user at once, over HTTP: decided one after the other, never a conflict.

Each test fires 50 creates with different Idempotency-Keys for one user,
mixed with verifies and consumes (or right and wrong codes) of a request
made just before, all at once through the whole ASGI stack; the app runs
each on a thread of its pool, so they meet on the database for real. The
clock is the system's: the order the events are stamped in is the order
they were decided in. The policies have no cooldown, so that every create
the hourly limit lets through issues a new request and supersedes the last.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections import Counter
from collections.abc import AsyncIterator, Awaitable
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import Engine, text

from domain.errors import ConcurrencyConflict
from domain.log import RecordedEvent
from domain.otp_events import OtpChallengeIssued, OtpChallengeVerified, OtpVerificationFailed, otp_stream
from domain.otp_state import fold_otp
from domain.policy import OtpPolicy, ResetPolicy
from domain.reset_events import ResetCompleted, ResetRequested, reset_stream
from domain.reset_state import fold_reset
from infra.clock import SystemClock
from infra.eventlog.postgres import PostgresEventStore
from infra.http.openapi import openapi_document
from infra.http.problems import problem_response
from infra.services.clients import create_client
from infra.services.unit_of_work import ServiceContext
from projections.timeline import event_times
from tests.conftest import ROOMY_SEND_LIMITS
from tests.support.keys import TEST_KEYS
from tests.http.support import asgi_client, code_for, token_for, wrong_code
from tests.support.replay import assert_projections_match_log

pytestmark = pytest.mark.anyio
ADA = {"user_id": "42", "email": "ada@example.com"}
CREATES = 50
HOURLY_LIMIT = 10
STREAM_IDS = text("SELECT DISTINCT stream_id FROM events")


@pytest.fixture
def busy_ctx(engine: Engine) -> ServiceContext:
    return ServiceContext(
        engine=engine, keys=TEST_KEYS, clock=SystemClock(), reset_url="https://app.test/reset",
        reset_policy=ResetPolicy(cooldown=timedelta(0), hourly_limit=HOURLY_LIMIT),
        otp_policy=OtpPolicy(cooldown=timedelta(0), hourly_limit=HOURLY_LIMIT), send_limits=ROOMY_SEND_LIMITS,
    )


@pytest.fixture
async def api(busy_ctx: ServiceContext) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(busy_ctx, create_client(busy_ctx, "shop").api_key) as client:
        yield client


def statuses(responses: list[httpx.Response]) -> Counter[int]:
    return Counter(response.status_code for response in responses)


def problem_types(responses: list[httpx.Response]) -> set[str]:
    return {response.json()["type"].rsplit(":", 1)[1] for response in responses if response.status_code >= 400}


def assert_event_times_never_go_backwards(engine: Engine) -> None:
    """On every stream, each event's time (as history shows it) is at or after the one before."""
    with engine.connect() as connection:
        store = PostgresEventStore(connection)
        for stream_id in connection.execute(STREAM_IDS).scalars():
            recorded = store.load(stream_id)
            times = event_times(recorded)
            in_stream_order = [times[r.global_position] for r in recorded]
            assert in_stream_order == sorted(in_stream_order), f"times on {stream_id} go backwards"


def load(engine: Engine, stream_id: str) -> list[RecordedEvent]:
    with engine.connect() as connection:
        return PostgresEventStore(connection).load(stream_id)


async def all_at_once_by_kind(*kinds: list[Awaitable[httpx.Response]]) -> list[list[httpx.Response]]:
    """Every call of every kind at once, in random order; the answers grouped by kind again."""
    tagged = [(n, call) for n, calls in enumerate(kinds) for call in calls]
    random.shuffle(tagged)
    answers = await asyncio.gather(*(call for _, call in tagged))
    return [[a for (n, _), a in zip(tagged, answers, strict=True) if n == kind] for kind in range(len(kinds))]


async def test_concurrent_reset_creates_verifies_and_consumes_for_one_user_never_conflict(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    first = await api.post("/v1/password-resets", json=ADA, headers={"Idempotency-Key": "first"})
    token = token_for(engine, first.json()["request_id"])
    creates = [api.post("/v1/password-resets", json=ADA, headers={"Idempotency-Key": f"k-{n}"})
               for n in range(CREATES)]
    consumes = [api.post("/v1/password-resets/consume", json={"token": token}) for _ in range(10)]
    verifies = [api.post("/v1/password-resets/verify", json={"token": token}) for _ in range(10)]

    created, consumed, verified = await all_at_once_by_kind(creates, consumes, verifies)

    assert statuses(created) == {202: HOURLY_LIMIT - 1, 429: CREATES - HOURLY_LIMIT + 1}
    assert set(statuses(consumed)) <= {200, 400} and statuses(consumed)[200] <= 1
    assert set(statuses(verified)) <= {200, 400}
    assert problem_types(created + consumed + verified) <= {"rate-limited", "token-invalid"}
    events = [r.event for r in load(engine, reset_stream("42"))]
    assert sum(isinstance(e, ResetRequested) for e in events) == HOURLY_LIMIT
    assert sum(isinstance(e, ResetCompleted) for e in events) == statuses(consumed)[200]
    state = fold_reset(events)
    newest = [e for e in events if isinstance(e, ResetRequested)][-1]
    assert [r.request_id for r in state.requests.values() if r.status == "open"] in ([], [newest.request_id])
    assert_event_times_never_go_backwards(engine)
    assert_projections_match_log(engine)


async def test_concurrent_otp_creates_and_verifies_for_one_user_never_conflict(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    first = await api.post("/v1/otp/challenges", json=ADA, headers={"Idempotency-Key": "first"})
    challenge_id = first.json()["challenge_id"]
    creates = [api.post("/v1/otp/challenges", json=ADA, headers={"Idempotency-Key": f"k-{n}"})
               for n in range(CREATES)]
    rights = [api.post(f"/v1/otp/challenges/{challenge_id}/verify",
                       json={"code": code_for(engine, challenge_id), "user_id": "42"})
              for _ in range(10)]
    wrongs = [api.post(f"/v1/otp/challenges/{challenge_id}/verify",
                       json={"code": wrong_code(engine, challenge_id), "user_id": "42"})
              for _ in range(10)]

    created, right, wrong = await all_at_once_by_kind(creates, rights, wrongs)

    assert statuses(created) == {202: HOURLY_LIMIT - 1, 429: CREATES - HOURLY_LIMIT + 1}
    assert set(statuses(right)) <= {200, 400} and statuses(right)[200] <= 1
    assert set(statuses(wrong)) == {400}
    assert problem_types(created + right + wrong) <= {"rate-limited", "code-rejected"}
    events = [r.event for r in load(engine, otp_stream("42"))]
    assert sum(isinstance(e, OtpChallengeIssued) for e in events) == HOURLY_LIMIT
    assert sum(isinstance(e, OtpChallengeVerified) for e in events) == statuses(right)[200]
    assert sum(isinstance(e, OtpVerificationFailed) for e in events) <= OtpPolicy().max_attempts
    state = fold_otp(events)
    newest = [e for e in events if isinstance(e, OtpChallengeIssued)][-1]
    assert [c.challenge_id for c in state.challenges.values() if c.status == "open"] in ([], [newest.challenge_id])
    assert_event_times_never_go_backwards(engine)
    assert_projections_match_log(engine)


def test_a_conflict_that_outlasts_the_retries_is_a_503_that_names_no_stream() -> None:
    response = problem_response(ConcurrencyConflict("stream reset-user:42 moved on while appending"))

    problem = json.loads(response.body)
    assert (response.status_code, problem["type"]) == (503, "urn:authledger:problem:concurrency-conflict")
    assert problem["code"] == "concurrency_conflict"
    assert "reset-user" not in response.body.decode() and "stream" not in problem["detail"]
    assert response.headers["Retry-After"] == "1"


def test_the_api_document_lists_no_409_but_a_request_in_flight() -> None:
    document = openapi_document(max_body_bytes=1024)
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            conflict = operation["responses"].get("409")
            if conflict is not None:
                problem_types = set(re.findall(r"`([a-z][a-z-]*)`", conflict["description"]))
                assert problem_types == {"idempotency-key-in-flight"}, (method, path)
