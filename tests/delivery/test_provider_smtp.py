"""The SMTP provider against a real SMTP server (aiosmtpd) on 127.0.0.1."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import uuid
from pathlib import Path
from typing import Any

import attrs
import pytest
from aiosmtpd.smtp import AuthResult, LoginPassword
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from domain.errors import ConfigError
from infra.delivery.providers import Mailer, OutboundEmail, OutcomeUnknown, PermanentSendError, RetryableSendError
from infra.delivery.providers.smtp import SmtpMailer
from tests.support.smtp_relay import Relay, start_relay

# No filterwarnings here: aiosmtpd 1.4.6 raises no Python warnings in these
# tests (its "login_data is deprecated" notice is a log record, not a warning),
# so the suite's warnings-are-errors rule applies to this module unchanged.

TOKEN = "q7Yc2lWmZt0v9bX1kR4sNw"  # stands for the secret a real email carries
PASSWORD = "hunter2-smtp-secret"


def a_mailer(port: int, **options: Any) -> SmtpMailer:
    options.setdefault("security", "none")
    options.setdefault("timeout", 2.0)
    return SmtpMailer("127.0.0.1", port, sender="bounces@example.com", local_hostname="worker.test", **options)


def an_email() -> OutboundEmail:
    return OutboundEmail(
        message_id=uuid.uuid4(),
        sender="Authledger <no-reply@example.com>",
        recipient="alice@example.com",
        subject="Reset your password",
        text_body=f"Reset it here: https://app.example/reset?token={TOKEN}",
        html_body=f'<p><a href="https://app.example/reset?token={TOKEN}">Reset it</a></p>',
    )


def test_smtp_mailer_is_a_mailer() -> None:
    mailer = a_mailer(25)

    assert isinstance(mailer, Mailer)
    assert mailer.name == "smtp"
    assert mailer.timeout_seconds == 2.0


def test_delivers_headers_and_both_bodies_with_the_message_id(relay: Relay) -> None:
    email = an_email()

    receipt = a_mailer(relay.port).send(email)

    [envelope] = relay.envelopes
    assert envelope.mail_from == "bounces@example.com"
    assert envelope.rcpt_tos == ["alice@example.com"]
    [message] = relay.messages()
    assert message["From"] == email.sender
    assert message["To"] == email.recipient
    assert message["Subject"] == email.subject
    assert message["Message-ID"] == f"<{email.message_id}@authledger>"
    assert receipt.provider == "smtp"
    assert receipt.provider_message_id == f"<{email.message_id}@authledger>"
    text = message.get_body(preferencelist=("plain",))
    html = message.get_body(preferencelist=("html",))
    assert text is not None and html is not None
    assert text.get_content().strip() == email.text_body
    assert html.get_content().strip() == email.html_body
    assert message["Content-Language"] == "en"


def test_a_german_email_says_so_and_its_umlauts_survive_a_seven_bit_relay(relay: Relay) -> None:
    email = attrs.evolve(an_email(), subject="Ihr Passwort wurde geändert", text_body="Es wurde geändert.",
                         locale="de")

    a_mailer(relay.port).send(email)

    [message] = relay.messages()
    assert message["Content-Language"] == "de"
    assert message["Subject"] == "Ihr Passwort wurde geändert"
    text = message.get_body(preferencelist=("plain",))
    assert text is not None and text.get_content().strip() == "Es wurde geändert."


@pytest.mark.parametrize("refusal", ["421 4.3.2 Service shutting down", "451 4.3.0 Try again later"])
def test_a_temporary_refusal_is_retryable_and_the_retry_delivers(relay: Relay, refusal: str) -> None:
    mailer = a_mailer(relay.port)
    email = an_email()
    relay.refusals["DATA"].append(refusal)

    with pytest.raises(RetryableSendError) as failure:
        mailer.send(email)
    mailer.send(email)

    assert not failure.value.outcome_unknown
    # 421 closes the relay's session for every email; a 451 to DATA is about this one.
    assert failure.value.provider_down == refusal.startswith("421")
    assert str(failure.value) == f"smtp DATA refused: {refusal[:9]}"
    assert len(relay.envelopes) == 1


def test_a_550_is_permanent_and_quotes_neither_address_nor_body(relay: Relay) -> None:
    relay.refusals["RCPT"].append("550 5.1.1 <alice@example.com>: Recipient address rejected")

    with pytest.raises(PermanentSendError) as failure:
        a_mailer(relay.port).send(an_email())

    assert not failure.value.retryable
    assert str(failure.value) == "smtp RCPT refused: 550 5.1.1"
    assert relay.envelopes == []


def test_a_relay_that_does_not_answer_the_data_is_an_unknown_outcome(relay: Relay) -> None:
    relay.held.add("DATA")

    with pytest.raises(OutcomeUnknown) as failure:
        a_mailer(relay.port, timeout=0.5).send(an_email())

    # The relay holds its answer until the test lets it go: only the mailer's own timeout can have ended the send.
    assert relay.data_commands == 1 and relay.envelopes == []
    relay.held.clear()
    assert failure.value.retryable and failure.value.outcome_unknown
    assert TOKEN not in str(failure.value)


def test_the_timeout_bounds_the_whole_conversation_not_each_command(relay: Relay) -> None:
    # Each command is answered within the timeout, but together they are not.
    relay.stall["MAIL"] = relay.stall["RCPT"] = 0.7

    with pytest.raises(RetryableSendError) as failure:
        a_mailer(relay.port, timeout=1.0).send(an_email())

    # RCPT alone answers within the limit: only a bound on the whole
    # conversation can time it out. (Timing it instead raced a busy machine.)
    assert str(failure.value) == "smtp timed out during RCPT (limit 1s)"
    assert not failure.value.outcome_unknown


def test_a_refused_connection_is_retryable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens on the port any more.

    with pytest.raises(RetryableSendError, match="^smtp connection refused$"):
        a_mailer(port).send(an_email())


def test_starttls_required_but_not_offered_is_retryable(relay: Relay) -> None:
    with pytest.raises(RetryableSendError, match="^smtp server does not support STARTTLS$"):
        a_mailer(relay.port, security="starttls").send(an_email())

    assert relay.envelopes == []


def test_implicit_tls_against_a_plain_relay_is_a_retryable_tls_error(relay: Relay) -> None:
    with pytest.raises(RetryableSendError, match="^smtp TLS failed during CONNECT: "):
        a_mailer(relay.port, security="tls").send(an_email())


def test_logs_in_with_the_configured_credentials() -> None:
    logins: list[LoginPassword] = []

    def authenticator(server: Any, session: Any, envelope: Any, mechanism: str, data: LoginPassword) -> AuthResult:
        logins.append(data)
        return AuthResult(success=data.password == PASSWORD.encode(), handled=False)

    relay = Relay()
    controller = start_relay(relay, authenticator=authenticator, auth_require_tls=False)
    try:
        a_mailer(relay.port, username="app", password=PASSWORD).send(an_email())
        with pytest.raises(RetryableSendError) as failure:
            a_mailer(relay.port, username="app", password="wrong").send(an_email())
    finally:
        controller.stop()

    # smtplib tries each mechanism the relay offers before it gives up.
    assert {login.login for login in logins} == {b"app"}
    assert len(relay.envelopes) == 1
    # A bad password is the account's problem, not the email's: keep retrying.
    assert str(failure.value) == "smtp AUTH refused: 535 5.7.8"
    assert PASSWORD not in str(failure.value)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, as (cert, key) PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "relay.test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    directory = tmp_path_factory.mktemp("tls")
    cert_path, key_path = directory / "relay.pem", directory / "relay.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


def server_context(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    return context


def client_context(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certificate[0]))


def test_delivers_over_starttls_checking_the_relays_certificate(certificate: tuple[Path, Path]) -> None:
    relay = Relay()
    controller = start_relay(relay, tls_context=server_context(certificate), require_starttls=True)
    try:
        mailer = a_mailer(relay.port, security="starttls", ssl_context=client_context(certificate))
        mailer.send(an_email())
        with pytest.raises(RetryableSendError, match="^smtp TLS failed during STARTTLS: .*certificate"):
            a_mailer(relay.port, security="starttls").send(an_email())  # trusts only the system CAs
    finally:
        controller.stop()

    assert len(relay.envelopes) == 1


def test_delivers_over_implicit_tls(certificate: tuple[Path, Path]) -> None:
    relay = Relay()
    controller = start_relay(relay, ssl_context=server_context(certificate))
    try:
        a_mailer(relay.port, security="tls", ssl_context=client_context(certificate)).send(an_email())
    finally:
        controller.stop()

    assert len(relay.envelopes) == 1


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("smtp://relay.internal", ("relay.internal", 25, "none")),
        ("smtp+starttls://app:p%40ss@smtp.example.com", ("smtp.example.com", 587, "starttls")),
        ("smtps://app:pass@smtp.example.com:2465", ("smtp.example.com", 2465, "tls")),
    ],
)
def test_builds_from_a_url(url: str, expected: tuple[str, int, str]) -> None:
    mailer = SmtpMailer.from_url(url, "bounces@example.com", timeout=3.0)

    assert (mailer.host, mailer.port, mailer.security) == expected
    assert mailer.timeout_seconds == 3.0
    assert "pass" not in repr(mailer)


@pytest.mark.parametrize(
    "url",
    [
        f"http://app:{PASSWORD}@smtp.example.com",
        f"smtp+starttls://app:{PASSWORD}@smtp.example.com:notaport",
        f"smtps://app:{PASSWORD}@:465",
        f"smtps://app:{PASSWORD}@smtp.example.com/inbox",
        f"smtp://app:{PASSWORD}@smtp.example.com",  # credentials in the clear over the network
        f"smtp+starttls//app:{PASSWORD}@smtp.example.com",
        "smtp+starttls://app@smtp.example.com",
    ],
)
def test_a_malformed_url_is_a_config_error_that_does_not_echo_the_password(url: str) -> None:
    with pytest.raises(ConfigError) as failure:
        SmtpMailer.from_url(url, "bounces@example.com")

    assert PASSWORD not in str(failure.value)
    assert failure.value.__cause__ is None


def test_a_sender_with_a_display_name_goes_out_as_a_bare_envelope_address(relay: Relay) -> None:
    SmtpMailer("127.0.0.1", relay.port, sender="authledger <no-reply@authledger.localhost>", security="none",
               timeout=2.0, local_hostname="worker.test").send(an_email())

    [envelope] = relay.envelopes
    assert envelope.mail_from == "no-reply@authledger.localhost"


@pytest.mark.parametrize("sender", ["nobody", "a@example.com, b@example.com"])
def test_a_sender_that_is_not_one_address_is_refused_at_start(sender: str) -> None:
    with pytest.raises(ConfigError, match="exactly one email address"):
        SmtpMailer("127.0.0.1", 25, sender=sender, security="none")
