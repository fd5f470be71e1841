"""Delivery to an SMTP relay with the standard library's smtplib."""

from __future__ import annotations

import contextlib
import ipaddress
import re
import smtplib
import socket
import ssl
import threading
from email.policy import SMTP as SMTP_POLICY
from email.policy import SMTPUTF8 as SMTPUTF8_POLICY
from typing import Literal
from urllib.parse import unquote, urlsplit

from domain.errors import ConfigError
from infra.delivery.providers import (
    OutboundEmail,
    OutcomeUnknown,
    PermanentSendError,
    ProviderReceipt,
    RetryableSendError,
    SendFailed,
    envelope_address,
    message_id_header,
)
from infra.delivery.providers.mime import render_mime

Security = Literal["none", "starttls", "tls"]

_SECURITY_VALUES = frozenset({"none", "starttls", "tls"})
_SCHEMES: dict[str, tuple[Security, int]] = {
    "smtp": ("none", 25),
    "smtp+starttls": ("starttls", 587),
    "smtps": ("tls", 465),
}

# Only a reply about this message's envelope or content can reject the
# message for good. A 5xx to EHLO, STARTTLS or AUTH is about the account or
# the relay, which an operator can fix: retrying keeps the email alive until
# then, and the attempt limit still ends it.
_MESSAGE_PHASES = frozenset({"MAIL", "RCPT", "DATA"})

_ENHANCED_STATUS = re.compile(rb"^\s*([245]\.\d{1,3}\.\d{1,3})\b")


class SmtpMailer:
    """Sends each email in one SMTP conversation, within ``timeout`` seconds in all.

    smtplib's timeout applies to each socket operation, and one send is some
    ten round trips, so a relay that answers every command just in time could
    stretch a send far past the lease. A watchdog therefore shuts the socket
    when the whole conversation runs out of time.

    SMTP has no idempotency key. The message id goes out as the Message-ID
    header and is the receipt's provider message id; a retry after an unknown
    outcome (a timeout during DATA) may deliver the email twice, and that is
    the known limit of SMTP.

    ``sender`` is the envelope sender (MAIL FROM, where bounces go); the From
    header comes from the email. Reply text from the relay is not copied into
    errors, only its codes: relays echo addresses back.
    """

    name = "smtp"
    idempotent = False  # SMTP has no idempotency key
    def __init__(
        self,
        host: str,
        port: int,
        *,
        sender: str,
        security: Security,
        username: str | None = None,
        password: str | None = None,
        timeout: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
        local_hostname: str | None = None,
    ) -> None:
        if security not in _SECURITY_VALUES:
            raise ConfigError("SMTP security must be one of: none, starttls, tls")
        if not host:
            raise ConfigError("SMTP host is missing")
        if (username is None) != (password is None):
            raise ConfigError("SMTP username and password must be given together")
        if username is not None and security == "none" and not _is_loopback(host):
            raise ConfigError("SMTP credentials need starttls or tls unless the relay is on this machine")
        if not timeout > 0:
            raise ConfigError("SMTP timeout must be positive")
        self.host = host
        self.port = port
        self.sender = envelope_address(sender)
        self.security = security
        self.timeout_seconds = float(timeout)
        self._credentials = None if username is None else (username, password or "")
        self._ssl_context = ssl_context or ssl.create_default_context()
        # smtplib would look the FQDN up again for every connection.
        self._local_hostname = local_hostname or socket.getfqdn()

    @classmethod
    def from_url(
        cls,
        url: str,
        sender: str,
        timeout: float = 10.0,
        *,
        ssl_context: ssl.SSLContext | None = None,
    ) -> SmtpMailer:
        """Build from ``smtp://``, ``smtp+starttls://`` or ``smtps://[user:pass@]host[:port]``.

        Raises ``ConfigError`` for a malformed URL. The messages never quote
        the URL, which may hold a password.
        """
        scheme, _, rest = url.partition("://")
        if not rest or scheme.lower() not in _SCHEMES:
            raise ConfigError("SMTP URL must start with smtp://, smtp+starttls:// or smtps://")
        security, default_port = _SCHEMES[scheme.lower()]
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            raise ConfigError("SMTP URL has an invalid host or port") from None
        if not parts.hostname:
            raise ConfigError("SMTP URL has no host")
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ConfigError("SMTP URL takes no path, query or fragment")
        if parts.username is not None and parts.password is None:
            raise ConfigError("SMTP URL has a user name but no password")
        return cls(
            parts.hostname,
            port or default_port,
            sender=sender,
            security=security,
            username=None if parts.username is None else unquote(parts.username),
            password=None if parts.password is None else unquote(parts.password),
            timeout=timeout,
            ssl_context=ssl_context,
        )

    def __repr__(self) -> str:
        return f"SmtpMailer({self.host!r}, {self.port}, security={self.security!r})"

    def send(self, email: OutboundEmail) -> ProviderReceipt:
        message = render_mime(email)
        utf8 = not all(a.isascii() for a in (self.sender, email.sender, email.recipient))
        data = message.as_bytes(policy=SMTPUTF8_POLICY if utf8 else SMTP_POLICY)
        options = ("SMTPUTF8", "BODY=8BITMIME") if utf8 else ()
        attempt = _Attempt(self.timeout_seconds)
        try:
            with attempt:
                self._converse(attempt, email.recipient, data, options)
        except OSError as e:  # smtplib's errors, ssl's and socket's are all OSErrors
            raise _translate(e, attempt) from e
        return ProviderReceipt(provider=self.name, provider_message_id=message_id_header(email.message_id))

    def _converse(self, attempt: _Attempt, recipient: str, data: bytes, options: tuple[str, ...]) -> None:
        if self.security == "tls":
            conn: smtplib.SMTP = smtplib.SMTP_SSL(
                local_hostname=self._local_hostname, timeout=self.timeout_seconds, context=self._ssl_context
            )
        else:
            conn = smtplib.SMTP(local_hostname=self._local_hostname, timeout=self.timeout_seconds)
        # TLS checks the certificate against ``_host``, which smtplib only sets
        # when the constructor connects; we connect below instead, so that the
        # watchdog already covers the connect and the greeting.
        conn._host = self.host
        attempt.watch(conn)
        try:
            _expect("CONNECT", conn.connect(self.host, self.port), wanted=220)
            attempt.phase = "EHLO"
            conn.ehlo_or_helo_if_needed()
            if self.security == "starttls":
                attempt.phase = "STARTTLS"
                conn.starttls(context=self._ssl_context)
                attempt.phase = "EHLO"
                conn.ehlo_or_helo_if_needed()
            if self._credentials is not None:
                attempt.phase = "AUTH"
                conn.login(*self._credentials)
            attempt.phase = "MAIL"
            _expect("MAIL", conn.mail(self.sender, options))
            attempt.phase = "RCPT"
            _expect("RCPT", conn.rcpt(recipient))
            attempt.phase = "DATA"
            _expect("DATA", conn.data(data))
            attempt.phase = "QUIT"  # accepted: whatever happens now does not matter
        finally:
            _close_quietly(conn)


class _Attempt:
    """One SMTP conversation: the command in progress and a deadline for the whole.

    When the deadline passes, the watchdog shuts the socket down (the plain
    socket's shutdown, under any TLS layer), which wakes the blocked read or
    write in the sending thread with an error that ``_translate`` then reads
    as a timeout.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.phase = "CONNECT"
        self.timed_out = False
        self._conn: smtplib.SMTP | None = None
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def watch(self, conn: smtplib.SMTP) -> None:
        self._conn = conn

    def __enter__(self) -> _Attempt:
        self._timer.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._timer.cancel()

    def _expire(self) -> None:
        self.timed_out = True
        sock = getattr(self._conn, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _expect(phase: str, reply: tuple[int, bytes], *, wanted: int | None = None) -> None:
    code, text = reply
    accepted = code == wanted if wanted is not None else 200 <= code < 300
    if not accepted:
        raise _refused(phase, code, text)


def _refused(phase: str, code: int, text: bytes | str) -> SendFailed:
    raw = text.encode("utf-8", "replace") if isinstance(text, str) else text
    match = _ENHANCED_STATUS.match(raw or b"")
    detail = f"smtp {phase} refused: {code}" + (f" {match.group(1).decode()}" if match else "")
    if phase in _MESSAGE_PHASES and 500 <= code < 600:
        return PermanentSendError(detail)
    return RetryableSendError(detail)


def _translate(error: OSError, attempt: _Attempt) -> SendFailed:
    """Map an smtplib, ssl or socket error to the port's errors, by command in progress."""
    phase = attempt.phase
    if isinstance(error, smtplib.SMTPResponseException):
        return _refused(phase, error.smtp_code, error.smtp_error)
    if isinstance(error, smtplib.SMTPNotSupportedError):
        # In MAIL it is SMTPUTF8 for this message's addresses: permanent.
        what = "SMTPUTF8" if phase == "MAIL" else phase
        kind = PermanentSendError if phase == "MAIL" else RetryableSendError
        return kind(f"smtp server does not support {what}")
    timed_out = attempt.timed_out or _caused_by(error, TimeoutError)
    if phase == "DATA":
        # The message may be on the relay already, its 250 lost on the way.
        cause = "timed out" if timed_out else "connection lost"
        return OutcomeUnknown(f"smtp {cause} during DATA; the relay may have accepted the message")
    if timed_out:
        return RetryableSendError(f"smtp timed out during {phase} (limit {attempt.seconds:g}s)")
    tls = _cause(error, ssl.SSLError)
    if tls is not None:
        reason = getattr(tls, "verify_message", None) or getattr(tls, "reason", None) or type(tls).__name__
        return RetryableSendError(f"smtp TLS failed during {phase}: {reason}")
    if _caused_by(error, ConnectionRefusedError):
        return RetryableSendError("smtp connection refused")
    if isinstance(error, smtplib.SMTPServerDisconnected) or _caused_by(error, ConnectionError):
        return RetryableSendError(f"smtp connection lost during {phase}")
    return RetryableSendError(f"smtp {phase} failed: {error.strerror or type(error).__name__}")


def _cause(error: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first error of ``kind`` in the chain (smtplib re-raises socket errors as its own)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, kind):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _caused_by(error: BaseException, kind: type[BaseException]) -> bool:
    return _cause(error, kind) is not None


def _close_quietly(conn: smtplib.SMTP) -> None:
    try:
        conn.quit()
    except OSError:
        conn.close()


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
