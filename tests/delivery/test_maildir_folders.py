"""A Maildir that exists but lacks its subfolders still takes mail; a write that fails is the provider's fault."""

from __future__ import annotations

import logging
import mailbox
import shutil
import uuid
from pathlib import Path

import pytest
from sqlalchemy import Engine

from domain.circuit import CircuitPolicy
from domain.outage import ProviderOutageBegan, provider_stream
from infra.delivery.breaker import Breaker, Outcome, outcome_of
from infra.delivery.providers import OutboundEmail, RetryableSendError
from infra.delivery.providers.maildir import MaildirMailer
from infra.services.unit_of_work import ServiceContext
from tests.support.log_reading import stream_events


def an_email() -> OutboundEmail:
    return OutboundEmail(message_id=uuid.uuid4(), sender="Authledger <no-reply@example.com>",
                         recipient="alice@example.com", subject="Your code", text_body="Your code is in the app.",
                         html_body="<p>Your code is in the app.</p>")


def test_an_existing_empty_folder_gets_its_subfolders_and_takes_mail(tmp_path: Path) -> None:
    folder = tmp_path / "mail"
    folder.mkdir()

    email = an_email()
    MaildirMailer(folder, "bounces@example.com").send(email)

    assert {path.name for path in folder.iterdir()} >= {"cur", "new", "tmp"}
    assert list(mailbox.Maildir(folder, create=False).keys()) == [str(email.message_id)]


def test_a_folder_missing_only_some_subfolders_gets_the_rest(tmp_path: Path) -> None:
    folder = tmp_path / "mail"
    (folder / "new").mkdir(parents=True)

    MaildirMailer(folder, "bounces@example.com").send(an_email())

    assert len(list(mailbox.Maildir(folder, create=False).keys())) == 1


def test_a_failed_write_says_the_provider_is_down_and_is_logged_as_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "mail"
    mailer = MaildirMailer(folder, "bounces@example.com")
    shutil.rmtree(folder / "tmp")
    (folder / "tmp").write_text("not a folder")  # every write fails, whoever runs the test (root included)

    with caplog.at_level(logging.INFO, logger="authledger"), pytest.raises(RetryableSendError) as failed:
        mailer.send(an_email())

    assert failed.value.provider_down and outcome_of(failed.value) is Outcome.DOWN  # counts toward opening the circuit
    [warning] = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert warning.getMessage().startswith("maildir write failed")


def test_failed_writes_of_different_emails_open_the_circuit_and_record_the_outage(
    tmp_path: Path, ctx: ServiceContext, engine: Engine
) -> None:
    folder = tmp_path / "mail"
    mailer = MaildirMailer(folder, "bounces@example.com")
    shutil.rmtree(folder / "tmp")
    (folder / "tmp").write_text("not a folder")
    breaker = Breaker(ctx, mailer.name, owner="worker-1")

    for _ in range(CircuitPolicy().failures_to_open):
        email = an_email()
        with pytest.raises(RetryableSendError) as failed:
            mailer.send(email)
        breaker.observe(email.message_id, failed.value)
    breaker.record()

    assert breaker.state == "open"
    [began] = stream_events(engine, provider_stream("maildir"))
    assert isinstance(began, ProviderOutageBegan) and began.last_error == "maildir write failed: Not a directory"
