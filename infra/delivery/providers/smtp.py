"""Delivery to an SMTP relay with the standard library's smtplib."""

from __future__ import annotations

import asyncio
import ipaddress
import smtplib
import socket
import ssl
from email.policy import SMTP as SMTP_POLICY
from email.policy import SMTPUTF8 as SMTPUTF8_POLICY
from typing import Literal
from urllib.parse import unquote, urlsplit

from domain.errors import ConfigError
from infra.delivery.providers import (
    OutboundEmail,
    ProviderReceipt,
    envelope_address,
    message_id_header,
    single_recipient,
)
from infra.delivery.providers.mime import render_mime
from infra.delivery.providers.smtp_pool import SessionPool, close_quietly
from infra.delivery.providers.smtp_replies import (
    Attempt,
    expect,
    session_survives,
    translate,
    worth_a_fresh_session,
)
from infra.delivery.providers.threads import SendThreads

Security = Literal["none", "starttls", "tls"]

_SECURITY_VALUES = frozenset({"none", "starttls", "tls"})
_SCHEMES: dict[str, tuple[Security, int]] = {
    "smtp": ("none", 25),
    "smtp+starttls": ("starttls", 587),
    "smtps": ("tls", 465),
}


class SmtpMailer:
    """Sends each email as one mail transaction, within ``timeout`` seconds in all.

    Sessions persist: up to ``window`` logged-in connections stay open
    between messages (``SessionPool``), so a message costs RSET, MAIL, RCPT
    and DATA rather than a connect, TLS and login. ``send`` is thread-safe;
    a worker calls it from up to ``window`` threads at once, and
    ``send_async`` runs it on threads of the mailer's own. A reused session
    that the relay has closed (421, or a dropped connection, noticed before
    DATA) is replaced and the message sent once more on a fresh one.

    smtplib's timeout applies to each socket operation, and one send is
    several round trips, so a relay that answers every command just in time
    could stretch a send far past the lease. A watchdog therefore shuts the
    socket when the whole send, a fresh session included, runs out of time.

    SMTP has no idempotency key. The message id goes out as the Message-ID
    header and is the receipt's provider message id; a retry after an unknown
    outcome (a timeout during DATA) may deliver the email twice, and that is
    the known limit of SMTP.

    ``sender`` is the envelope sender (MAIL FROM, where bounces go); the From
    header comes from the email. ``smtp_replies`` says what each reply means.
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
        window: int = 1,
        idle_seconds: float = 30.0,
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
        if window < 1:
            raise ConfigError("SMTP window must be at least 1")
        self.host = host
        self.port = port
        self.sender = envelope_address(sender)
        self.security = security
        self.timeout_seconds = float(timeout)
        self._credentials = None if username is None else (username, password or "")
        self._ssl_context = ssl_context or ssl.create_default_context()
        # smtplib would look the FQDN up again for every connection.
        self._local_hostname = local_hostname or socket.getfqdn()
        self._pool = SessionPool(window, idle_seconds)
        self._threads = SendThreads(self.send, window, self.name)

    @classmethod
    def from_url(
        cls,
        url: str,
        sender: str,
        timeout: float = 10.0,
        *,
        ssl_context: ssl.SSLContext | None = None,
        window: int = 1,
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
            window=window,
        )

    def __repr__(self) -> str:
        return f"SmtpMailer({self.host!r}, {self.port}, security={self.security!r})"

    def send(self, email: OutboundEmail) -> ProviderReceipt:
        data, options = self._encode(email)
        recipient = single_recipient(email).addr_spec  # the envelope's one RCPT TO, as the To header's
        attempt = Attempt(self.timeout_seconds)
        try:
            with attempt:
                try:
                    self._transact(attempt, recipient, data, options)
                except OSError as e:
                    if not worth_a_fresh_session(e, attempt):
                        raise
                    self._transact(attempt, recipient, data, options, fresh=True)
        except OSError as e:  # smtplib's errors, ssl's and socket's are all OSErrors
            raise translate(e, attempt) from e
        finally:
            self._keep(attempt)
        return ProviderReceipt(provider=self.name, provider_message_id=message_id_header(email.message_id))

    async def send_async(self, email: OutboundEmail) -> ProviderReceipt:
        return await self._threads(email)

    def close(self) -> None:
        """Closes the idle sessions (QUIT) and the send threads.

        ``send`` still works afterwards, on a new connection per message;
        ``send_async`` does not.
        """
        self._pool.close()
        self._threads.close()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def _encode(self, email: OutboundEmail) -> tuple[bytes, tuple[str, ...]]:
        message = render_mime(email)
        utf8 = not all(a.isascii() for a in (self.sender, email.sender, email.recipient))
        data = message.as_bytes(policy=SMTPUTF8_POLICY if utf8 else SMTP_POLICY)
        return data, (("SMTPUTF8", "BODY=8BITMIME") if utf8 else ())

    def _transact(
        self, attempt: Attempt, recipient: str, data: bytes, options: tuple[str, ...], *, fresh: bool = False
    ) -> None:
        """One mail transaction on an idle session (after RSET) or, failing one, a new session.

        The session goes back to the pool only after the send, in ``_keep``:
        until the watchdog is stopped, it may still shut the socket.
        """
        session = None if fresh else self._pool.take()
        reused = session is not None
        if session is None:
            session = self._open(attempt)
        attempt.watch(session)
        try:
            if reused:
                attempt.phase = "RSET"
                # Clears any state a refused message left, and finds out
                # whether the relay has dropped the session while it was idle.
                expect(session.rset())
            attempt.phase = "MAIL"
            expect(session.mail(self.sender, options))
            attempt.phase = "RCPT"
            expect(session.rcpt(recipient))
            attempt.phase = "DATA"
            expect(session.data(data))
        except OSError as e:
            if session_survives(e, attempt):
                attempt.sound_session = session
            else:
                close_quietly(session)
            raise
        attempt.sound_session = session

    def _keep(self, attempt: Attempt) -> None:
        """Pools the send's sound session, now that its watchdog can no longer shut it."""
        session = attempt.sound_session
        if session is None:
            return
        if attempt.timed_out:
            close_quietly(session)
        else:
            self._pool.put(session)

    def _open(self, attempt: Attempt) -> smtplib.SMTP:
        """A new session, greeted, EHLO'd, under TLS and logged in as configured."""
        attempt.phase = "CONNECT"
        if self.security == "tls":
            conn: smtplib.SMTP = smtplib.SMTP_SSL(
                local_hostname=self._local_hostname, timeout=self.timeout_seconds, context=self._ssl_context
            )
        else:
            conn = smtplib.SMTP(local_hostname=self._local_hostname, timeout=self.timeout_seconds)
        # TLS checks the certificate against ``_host``, which smtplib only sets
        # when the constructor connects; we connect below instead, so that the
        # watchdog already covers the connect and the greeting.
        conn._host = self.host  # type: ignore[attr-defined]  # private, so not in smtplib's stubs
        attempt.watch(conn)
        try:
            expect(conn.connect(self.host, self.port), wanted=220)
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
        except OSError:
            close_quietly(conn)
            raise
        return conn


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
