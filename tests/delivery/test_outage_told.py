"""While a provider is down, `outbox stuck` and `explain` name the outage, not the workers.

The worker is running, its circuit open and the outage recorded: mail that
waits is waiting for the provider. Telling the operator "are workers
running?" would send them looking in the wrong place.
"""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

from sqlalchemy import Engine

from domain.circuit import CircuitPolicy
from domain.outage import ProviderOutageBegan, ProviderOutageEnded, provider_stream
from domain.reset import RequestReset
from infra.clock import ManualClock
from infra.delivery.providers.maildir import MaildirMailer
from infra.delivery.status import stuck_messages
from infra.delivery.worker import Worker
from infra.review.history import explain
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.support.log_reading import stream_events

SENDER = "authledger <no-reply@app.test>"


def break_folder(folder: Path) -> None:
    shutil.rmtree(folder / "tmp")
    (folder / "tmp").write_text("not a folder")  # every write fails, whoever runs the test (root included)


def mend_folder(folder: Path) -> None:
    (folder / "tmp").unlink()
    (folder / "tmp").mkdir()


def test_mail_waiting_through_a_recorded_outage_is_told_as_waiting_for_the_provider(
    tmp_path: Path, ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    folder = tmp_path / "mail"
    mailer = MaildirMailer(folder, "bounces@app.test")
    break_folder(folder)
    requests = [request_reset(ctx, RequestReset(f"user-{n}", f"u{n}@example.test"))
                for n in range(CircuitPolicy().failures_to_open + 2)]

    Worker(ctx, mailer, sender=SENDER).drain()
    clock.advance(timedelta(minutes=5))

    [began] = stream_events(engine, provider_stream("maildir"))
    assert isinstance(began, ProviderOutageBegan)
    waiting = stuck_messages(engine, now=clock.now(), older_than_seconds=60)
    assert {m["message_id"] for m in waiting} == {str(r.message_id) for r in requests}
    for message in waiting:
        assert message["reason"].startswith("provider maildir is down since "), message["reason"]
        assert "are workers running?" not in message["reason"]
    told = explain(engine, request_id=requests[-1].request_id, now=clock.now())
    [still] = [f for f in told.findings if f.kind.startswith("waiting-for-")]
    assert still.kind == "waiting-for-provider"
    assert "provider maildir is down since" in still.sentence and "maildir write failed" in still.sentence

    mend_folder(folder)
    Worker(ctx, mailer, sender=SENDER).drain()

    assert [type(e) for e in stream_events(engine, provider_stream("maildir"))] == [
        ProviderOutageBegan, ProviderOutageEnded,
    ]
    assert stuck_messages(engine, now=clock.now(), older_than_seconds=60) == []


def test_mail_nobody_claimed_without_an_outage_is_still_told_as_waiting_for_a_worker(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    request = request_reset(ctx, RequestReset("42", "ada@example.test"))
    clock.advance(timedelta(minutes=5))

    [waiting] = stuck_messages(engine, now=clock.now(), older_than_seconds=60)
    assert waiting["reason"] == "queued and due, but no worker has claimed it: are workers running?"
    told = explain(engine, request_id=request.request_id, now=clock.now())
    assert [f.kind for f in told.findings if f.kind.startswith("waiting-for-")] == ["waiting-for-worker"]
