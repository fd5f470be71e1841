"""The erasure race through the real server: uvicorn on a port, three HTTP clients released together.

The rounds of ``tests/services/test_erasure_races.py``, fewer of them, each
call a request of its own (a reset create and an OTP create with the
`send` key of "shop", the erasure with the `admin` key of "ops"), so that
they meet on the database from the server's own threads. A 200
``{"recorded": true}`` leaves nothing readable or working from before it.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from uuid import UUID, uuid4

import httpx
import pytest
from sqlalchemy import Engine

from domain.errors import NotFound
from infra.clock import ManualClock
from infra.delivery.providers.maildir import MaildirMailer
from infra.delivery.worker import Worker
from infra.http.app import create_app
from infra.services.clients import create_client
from infra.services.unit_of_work import ServiceContext
from tests.conftest import TEST_KEYS
from tests.support.erasure_races import (
    REASON, Calls, NonceRecorder, erase_before, judge, maildir_recipients, play,
)
from tests.support.replay import assert_projections_match_log
from tests.support.servers import served

ROUNDS = 30
SENDER = "authledger <no-reply@app.test>"


@pytest.fixture
def nonces() -> NonceRecorder:
    return NonceRecorder()


@pytest.fixture
def racing_ctx(engine: Engine, clock: ManualClock, nonces: NonceRecorder) -> ServiceContext:
    return ServiceContext(engine=engine, keys=TEST_KEYS, clock=clock, reset_url="https://app.test/reset",
                          new_nonce=nonces)


def http_calls(base: str, send_key: str, admin_key: str) -> Calls:
    """Each call on a client of its own, answered as the services answer (see ``play``)."""
    def post(key: str, path: str, body: dict[str, str]) -> httpx.Response:
        # Creates take their idempotency key's lock before their stream's: the order the erasure must fit.
        headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": uuid4().hex}
        with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
            return client.post(path, json=body)

    def create(path: str, id_field: str, body: dict[str, str]) -> SimpleNamespace:
        response = post(send_key, path, body)
        assert response.status_code == 202, response.text
        answer = response.json()
        return SimpleNamespace(request_id=UUID(answer[id_field]), message_id=UUID(answer["message_id"]))

    def erase(user_id: str) -> SimpleNamespace:
        response = post(admin_key, f"/v1/users/{user_id}/erasure", {"reason": REASON})
        if response.status_code == 404:
            raise NotFound(response.json()["detail"])
        assert response.status_code == 200, response.text
        return SimpleNamespace(recorded=response.json()["recorded"])

    def calls(user_id: str, reset_address: str, otp_address: str) -> list:  # type: ignore[type-arg]
        return [lambda: create("/v1/password-resets", "request_id", {"user_id": user_id, "email": reset_address}),
                lambda: create("/v1/otp/challenges", "challenge_id", {"user_id": user_id, "email": otp_address}),
                lambda: erase(user_id)]
    return calls


def test_over_http_an_erasure_answered_recorded_leaves_nothing_readable_or_working_from_before_it(
    racing_ctx: ServiceContext, clock: ManualClock, nonces: NonceRecorder, engine: Engine, tmp_path: Path
) -> None:
    send_key = create_client(racing_ctx, "shop").api_key
    admin_key = create_client(racing_ctx, "ops", scopes=["admin"]).api_key
    fresh = [f"web-{n}" for n in range(ROUNDS // 2)]
    back = [f"web-back-{n}" for n in range(ROUNDS - len(fresh))]
    erased_earlier = erase_before(racing_ctx, clock, back)

    with served(create_app(racing_ctx)) as base:
        calls = http_calls(base, send_key, admin_key)
        rounds = [play(nonces, n, user_id, 0, calls) for n, user_id in enumerate(fresh)]
        rounds += [play(nonces, len(fresh) + n, user_id, 1, calls) for n, user_id in enumerate(back)]

    mail = tmp_path / "mail"
    Worker(racing_ctx, MaildirMailer(mail, "bounces@app.test"), sender=SENDER).drain()
    verdict = judge(racing_ctx, rounds, delivered_to=maildir_recipients(mail), earlier_addresses=erased_earlier)
    assert verdict.wrong == [], verdict.summary()
    assert_projections_match_log(engine)
