"""Support withdraws a link through `authledger serve` itself, then a worker process finds its email unwanted.

The server runs without its own worker (``--inflight 0``), so the email is
still queued when support acts, whatever the scheduling; `worker --once`
then skips it, and the Maildir stays empty. A fresh link sent by support
afterwards is the one email delivered.
"""

from __future__ import annotations

import json
import mailbox
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import httpx
import pytest
from sqlalchemy import Engine

from infra.services.clients import create_client
from infra.services.unit_of_work import ServiceContext
from tests.http.support import token_for
from tests.support.cli import Env, cli_outcome
from tests.support.servers import start_serve

REASON = "ticket 4711: the user reports a link they did not ask for"


@pytest.fixture
def base_url(env: Env, tmp_path: Path) -> Iterator[str]:
    process, base = start_serve({**env, "AUTHLEDGER_DATA_DIR": str(tmp_path / "data")}, tmp_path, "--inflight", "0")
    try:
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_withdrawn_link_is_refused_by_the_server_and_its_email_never_leaves(
    ctx: ServiceContext, engine: Engine, env: Env, base_url: str
) -> None:
    app = {"Authorization": f"Bearer {create_client(ctx, 'shop').api_key}"}
    helpdesk = {"Authorization": f"Bearer {create_client(ctx, 'helpdesk', scopes=['admin']).api_key}"}
    made = httpx.post(f"{base_url}/v1/password-resets", json={"user_id": "42", "email": "ada@example.test"},
                      headers={**app, "Idempotency-Key": str(uuid4())})
    assert made.status_code == 202, made.text
    token = token_for(engine, made.json()["request_id"])

    withdrawn = httpx.post(f"{base_url}/v1/users/42/invalidation", json={"reason": REASON}, headers=helpdesk)
    presented = httpx.post(f"{base_url}/v1/password-resets/verify", json={"token": token}, headers=app)

    assert withdrawn.status_code == 200 and withdrawn.json()["invalidated_links"] == 1
    assert presented.status_code == 400
    assert presented.json()["detail"] == "The reset link was withdrawn by support."
    code, delivered = cli_outcome(env, "worker", "--once", "--json")
    assert (code, json.loads(delivered)) == (0, {"skipped": 1})
    assert list(mailbox.Maildir(str(env["AUTHLEDGER_MAILDIR"]), create=True)) == []

    resent = httpx.post(f"{base_url}/v1/users/42/resend", json={"flow": "reset", "reason": REASON},
                        headers=helpdesk)

    assert resent.status_code == 202, resent.text
    code, delivered = cli_outcome(env, "worker", "--once", "--json")
    assert (code, json.loads(delivered)) == (0, {"sent": 1})
    [message] = mailbox.Maildir(str(env["AUTHLEDGER_MAILDIR"]), create=False)
    assert message["Message-ID"].strip("<>").split("@")[0] == resent.json()["message_id"]
