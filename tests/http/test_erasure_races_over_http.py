"""The erasure race through the real server: uvicorn on a port, three HTTP clients released together.

The rounds of ``tests/services/test_erasure_races.py``, fewer of them, each
call a request of its own (a reset create and an OTP create with the
`send` key of "shop", the erasure with the `admin` key of "ops"), so that
they meet on the database from the server's own threads. A 200
``{"recorded": true}`` leaves nothing readable or working from before it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
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
from tests.support.erasure_races import (
    REASON, Calls, NonceRecorder, erase_before, judge, maildir_recipients, play,
)
from tests.support.replay import assert_projections_match_log
from tests.support.servers import served

ROUNDS = 60
SENDER = "authledger <no-reply@app.test>"


def http_calls(clients: Sequence[httpx.Client], send_key: str, admin_key: str) -> Calls:
    """The round's calls, each on a client of its own kept open between rounds (so no call waits to connect),
    answered as the services answer (see ``play``)."""
    resets, challenges, erasures = clients

    def post(client: httpx.Client, key: str, path: str, body: dict[str, str]) -> httpx.Response:
        # Creates take their idempotency key's lock before their stream's: the order the erasure must fit.
        return client.post(path, json=body, headers={"Authorization": f"Bearer {key}", "Idempotency-Key": uuid4().hex})

    def create(client: httpx.Client, path: str, id_field: str, body: dict[str, str]) -> SimpleNamespace:
        response = post(client, send_key, path, body)
        assert response.status_code == 202, response.text
        answer = response.json()
        return SimpleNamespace(request_id=UUID(answer[id_field]), message_id=UUID(answer["message_id"]))

    def erase(user_id: str) -> SimpleNamespace:
        response = post(erasures, admin_key, f"/v1/users/{user_id}/erasure", {"reason": REASON})
        if response.status_code == 404:
            raise NotFound(response.json()["detail"])
        assert response.status_code == 200, response.text
        return SimpleNamespace(recorded=response.json()["recorded"])

    def calls(user_id: str, reset_address: str, otp_address: str) -> list[Callable[[], SimpleNamespace]]:
        return [lambda: create(resets, "/v1/password-resets", "request_id",
                               {"user_id": user_id, "email": reset_address}),
                lambda: create(challenges, "/v1/otp/challenges", "challenge_id",
                               {"user_id": user_id, "email": otp_address}),
                lambda: erase(user_id)]
    return calls


@pytest.mark.slow
def test_over_http_an_erasure_answered_recorded_leaves_nothing_readable_or_working_from_before_it(
    racing_ctx: ServiceContext, clock: ManualClock, nonces: NonceRecorder, engine: Engine, tmp_path: Path
) -> None:
    send_key = create_client(racing_ctx, "shop").api_key
    admin_key = create_client(racing_ctx, "ops", scopes=["admin"]).api_key
    fresh = [f"web-{n}" for n in range(ROUNDS // 2)]
    back = [f"web-back-{n}" for n in range(ROUNDS - len(fresh))]
    erased_earlier = erase_before(racing_ctx, clock, back)

    rounds = []
    with served(create_app(racing_ctx)) as base, contextlib.ExitStack() as stack:
        clients = [stack.enter_context(httpx.Client(base_url=base, timeout=30)) for _ in range(3)]
        calls = http_calls(clients, send_key, admin_key)
        for number, user_id in enumerate([*fresh, *back]):
            rounds.append(play(nonces, number, user_id, int(user_id in back), calls))
            clock.advance(1)  # a second a round, as a client would pace them: no rate is the point here

    mail = tmp_path / "mail"
    Worker(racing_ctx, MaildirMailer(mail, "bounces@app.test"), sender=SENDER).drain()
    verdict = judge(racing_ctx, rounds, delivered_to=maildir_recipients(mail), earlier_addresses=erased_earlier)
    assert verdict.wrong == [], verdict.summary()
    assert verdict.recorded and verdict.erased_creates, "erasures were recorded with creates before them"
    assert_projections_match_log(engine)
