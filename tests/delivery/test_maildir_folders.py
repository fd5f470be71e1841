"""A Maildir that exists but lacks its subfolders still takes mail; a write that fails is the provider's fault."""

from __future__ import annotations

import logging
import mailbox
import shutil
import uuid
from pathlib import Path

import pytest

from infra.delivery.breaker import Outcome, outcome_of
from infra.delivery.providers import OutboundEmail, RetryableSendError
from infra.delivery.providers.maildir import MaildirMailer


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
