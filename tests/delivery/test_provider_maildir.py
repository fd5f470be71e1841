"""The Maildir provider on a real directory, read back with the stdlib's mailbox."""

from __future__ import annotations

import asyncio
import mailbox
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from email import message_from_bytes
from email.message import EmailMessage
from email.policy import default as default_policy
from pathlib import Path

import pytest

from infra.delivery.providers import AsyncMailer, Mailer, OutboundEmail, PermanentSendError, ProviderReceipt
from infra.delivery.providers.maildir import MaildirMailer

TOKEN = "q7Yc2lWmZt0v9bX1kR4sNw"  # stands for the secret a real email carries


def an_email(subject: str = "Reset your password") -> OutboundEmail:
    return OutboundEmail(
        message_id=uuid.uuid4(),
        sender="Authledger <no-reply@example.com>",
        recipient="alice@example.com",
        subject=subject,
        text_body=f"Reset it here: https://app.example/reset?token={TOKEN}",
        html_body=f'<p><a href="https://app.example/reset?token={TOKEN}">Reset it</a></p>',
    )


def delivered(path: Path) -> dict[str, EmailMessage]:
    """Every message in the Maildir, by key, parsed as a modern EmailMessage."""
    box = mailbox.Maildir(path, create=False)
    return {key: message_from_bytes(box.get_bytes(key), policy=default_policy) for key in box.keys()}


def files_in(path: Path) -> list[str]:
    return sorted(os.listdir(path / "new")) + sorted(os.listdir(path / "cur")) + sorted(os.listdir(path / "tmp"))


def test_maildir_mailer_is_a_mailer(tmp_path: Path) -> None:
    mailer = MaildirMailer(tmp_path / "mail", "bounces@example.com")

    assert isinstance(mailer, Mailer)
    assert mailer.name == "maildir"


def test_creates_the_maildir_and_delivers_a_text_and_html_message(tmp_path: Path) -> None:
    email = an_email()

    receipt = MaildirMailer(tmp_path / "mail", "bounces@example.com").send(email)

    assert receipt == ProviderReceipt(provider="maildir", provider_message_id=str(email.message_id))
    [(key, message)] = delivered(tmp_path / "mail").items()
    assert key == receipt.provider_message_id
    assert message["Message-ID"] == f"<{email.message_id}@authledger>"
    assert message["From"] == email.sender
    assert message["To"] == email.recipient
    assert message["Subject"] == email.subject
    assert message["Return-Path"] == "<bounces@example.com>"
    assert message["Date"] is not None
    assert message.get_content_type() == "multipart/alternative"
    text = message.get_body(preferencelist=("plain",))
    html = message.get_body(preferencelist=("html",))
    assert text is not None and html is not None
    assert text.get_content().strip() == email.text_body
    assert html.get_content().strip() == email.html_body


def test_sending_the_same_message_again_writes_nothing_and_returns_the_same_receipt(tmp_path: Path) -> None:
    mailer = MaildirMailer(tmp_path / "mail", "bounces@example.com")
    email = an_email()
    first = mailer.send(email)
    before = files_in(tmp_path / "mail")

    second = mailer.send(email)

    assert second == first
    assert files_in(tmp_path / "mail") == before
    assert len(delivered(tmp_path / "mail")) == 1


def test_a_message_already_read_is_not_delivered_again(tmp_path: Path) -> None:
    mailer = MaildirMailer(tmp_path / "mail", "bounces@example.com")
    email = an_email()
    receipt = mailer.send(email)
    box = mailbox.Maildir(tmp_path / "mail", create=False)
    read = box[receipt.provider_message_id]
    read.set_subdir("cur")
    read.add_flag("S")
    box[receipt.provider_message_id] = read  # what a mail reader does: new/ -> cur/

    assert mailer.send(email) == receipt
    assert list(delivered(tmp_path / "mail")) == [receipt.provider_message_id]


def test_another_mailer_on_the_same_maildir_sees_the_earlier_delivery(tmp_path: Path) -> None:
    email = an_email()
    first = MaildirMailer(tmp_path / "mail", "bounces@example.com").send(email)

    assert MaildirMailer(tmp_path / "mail", "bounces@example.com").send(email) == first
    assert len(delivered(tmp_path / "mail")) == 1


def test_concurrent_sends_of_one_message_deliver_it_once(tmp_path: Path) -> None:
    # Each thread has its own mailer, as separate worker processes would.
    email = an_email()
    mailers = [MaildirMailer(tmp_path / "mail", "bounces@example.com") for _ in range(16)]

    with ThreadPoolExecutor(max_workers=16) as pool:
        receipts = set(pool.map(lambda mailer: mailer.send(email), mailers))

    assert receipts == {ProviderReceipt("maildir", str(email.message_id))}
    assert len(delivered(tmp_path / "mail")) == 1
    assert os.listdir(tmp_path / "mail" / "tmp") == []


def test_different_messages_are_all_delivered(tmp_path: Path) -> None:
    mailer = MaildirMailer(tmp_path / "mail", "bounces@example.com")
    emails = [an_email(f"message {i}") for i in range(3)]

    for email in emails:
        mailer.send(email)

    assert set(delivered(tmp_path / "mail")) == {str(e.message_id) for e in emails}


def test_a_subject_with_a_line_break_is_refused_without_quoting_the_email(tmp_path: Path) -> None:
    mailer = MaildirMailer(tmp_path / "mail", "bounces@example.com")

    with pytest.raises(PermanentSendError) as failure:
        mailer.send(an_email(subject="Hello\r\nBcc: mallory@example.com"))

    assert "mallory" not in str(failure.value)
    assert TOKEN not in str(failure.value)
    assert delivered(tmp_path / "mail") == {}


def test_a_sender_with_a_display_name_writes_the_bare_address_as_return_path(tmp_path: Path) -> None:
    MaildirMailer(tmp_path / "mail", "authledger <no-reply@authledger.localhost>").send(an_email())

    [message] = delivered(tmp_path / "mail").values()
    assert message["Return-Path"] == "<no-reply@authledger.localhost>"


def test_send_async_delivers_a_window_of_messages_each_once(tmp_path: Path) -> None:
    mailer = MaildirMailer(tmp_path / "mail", "bounces@example.com", window=8)
    emails = [an_email(f"message {i}") for i in range(24)]
    assert isinstance(mailer, AsyncMailer)

    async def send_all() -> list[ProviderReceipt]:
        try:
            return await asyncio.gather(*(mailer.send_async(email) for email in emails))
        finally:
            await mailer.aclose()

    receipts = asyncio.run(send_all())

    assert receipts == [ProviderReceipt("maildir", str(e.message_id)) for e in emails]
    assert set(delivered(tmp_path / "mail")) == {str(e.message_id) for e in emails}
