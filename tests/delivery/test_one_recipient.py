"""Every delivered email has exactly one recipient, equal to the address given, whatever the provider.

Maildir and SMTP (aiosmtpd) are read back and their To header parsed; SMTP's
envelope recipients are what the relay was told in RCPT TO; the HTTP
provider's ``to`` is what the stub received. An address the one rule refuses
(one queued before the rule was strict) fails for good, before any provider
sees it.
"""

from __future__ import annotations

import mailbox
import uuid
from collections.abc import Iterator
from email import message_from_bytes
from email.message import EmailMessage
from email.policy import default as default_policy
from pathlib import Path

import pytest
from attrs import frozen
from sqlalchemy import Engine

from domain.email import SendAttemptFailed
from domain.reset import RequestReset
from infra.delivery.providers import OutboundEmail, PermanentSendError
from infra.delivery.providers.http import HttpMailer
from infra.delivery.providers.maildir import MaildirMailer
from infra.delivery.providers.smtp import SmtpMailer
from infra.delivery.worker import Worker
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.support.addresses import ACCEPTED, HOSTILE, LEGACY, assert_mentions_no_address, old_rule
from tests.support.http_provider import FakeHttpProvider
from tests.support.log_reading import email_event_types, stream_events
from tests.support.replay import assert_projections_match_log
from tests.support.smtp_relay import Relay

SENDER = "Authledger <no-reply@example.com>"


def an_email(recipient: str) -> OutboundEmail:
    return OutboundEmail(uuid.uuid4(), SENDER, recipient, "Reset your password", "text", "<p>html</p>")


def recipients_of(message: EmailMessage) -> list[str]:
    """Every address the message's recipient headers name, as a header-routing relay would read them."""
    return [a.addr_spec for name in ("To", "Cc", "Bcc") for header in message.get_all(name, [])
            for a in header.addresses]


def maildir_messages(path: Path) -> list[EmailMessage]:
    box = mailbox.Maildir(path, create=False)
    return [message_from_bytes(box.get_bytes(key), policy=default_policy) for key in box.keys()]


@pytest.fixture
def http_provider() -> Iterator[FakeHttpProvider]:
    with FakeHttpProvider() as provider:
        yield provider


def smtp_mailer(relay: Relay) -> SmtpMailer:
    return SmtpMailer("127.0.0.1", relay.port, sender="bounces@example.com", security="none", timeout=2.0)


@pytest.mark.parametrize("address", ACCEPTED)
def test_maildir_delivers_to_exactly_the_one_address_given(tmp_path: Path, address: str) -> None:
    MaildirMailer(tmp_path / "mail", "bounces@example.com").send(an_email(address))

    [message] = maildir_messages(tmp_path / "mail")
    assert recipients_of(message) == [address]


@pytest.mark.parametrize("address", ACCEPTED)
def test_smtp_delivers_to_exactly_the_one_address_given_in_envelope_and_header(relay: Relay, address: str) -> None:
    smtp_mailer(relay).send(an_email(address))

    [envelope] = relay.envelopes
    assert envelope.rcpt_tos == [address]
    [message] = relay.messages()
    assert recipients_of(message) == [address]


@pytest.mark.parametrize("address", ACCEPTED)
def test_the_http_provider_gets_the_one_address_as_a_single_string(
    http_provider: FakeHttpProvider, address: str
) -> None:
    with HttpMailer(http_provider.url, timeout=2.0) as mailer:
        mailer.send(an_email(address))

    [sent] = http_provider.accepted
    assert sent.payload["to"] == address


@pytest.mark.parametrize("address", HOSTILE)
def test_no_provider_sends_to_an_address_the_rule_refuses(
    tmp_path: Path, relay: Relay, http_provider: FakeHttpProvider, address: str
) -> None:
    with HttpMailer(http_provider.url, timeout=2.0) as http:
        mailers = [MaildirMailer(tmp_path / "mail", "bounces@example.com"), smtp_mailer(relay), http]
        for mailer in mailers:
            with pytest.raises(PermanentSendError, match="^the recipient is not a single plain address: ") as failure:
                mailer.send(an_email(address))
            assert_mentions_no_address(str(failure.value), address)

    assert maildir_messages(tmp_path / "mail") == []
    assert relay.connections == 0 and relay.envelopes == []
    assert http_provider.requests == []


@frozen
class RequestResetUnderTheOldRule(RequestReset):
    """A reset request as it was checked before the one address rule: how legacy addresses got into the log."""

    def __attrs_post_init__(self) -> None:
        old_rule(self.recipient)


@pytest.mark.parametrize("address", LEGACY)
def test_a_legacy_queued_address_still_folds_and_fails_for_good_at_send_time(
    ctx: ServiceContext, engine: Engine, tmp_path: Path, address: str
) -> None:
    request = request_reset(ctx, RequestResetUnderTheOldRule("42", address))
    mailer = MaildirMailer(tmp_path / "mail", "bounces@example.com")

    assert Worker(ctx, mailer, sender=SENDER).drain() == {"failed": 1}

    assert maildir_messages(tmp_path / "mail") == []
    assert email_event_types(engine, request.message_id) == ["EmailQueued", "LeaseClaimed", "SendAttemptFailed"]
    [failure] = [e for e in stream_events(engine, f"email:{request.message_id}") if isinstance(e, SendAttemptFailed)]
    assert failure.retryable is False and failure.retry_at is None
    assert failure.error.startswith("the recipient is not a single plain address: ")
    assert_mentions_no_address(failure.error, address)
    assert_projections_match_log(engine)
