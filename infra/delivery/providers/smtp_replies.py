"""What an SMTP conversation's replies and errors mean for ``SmtpMailer``.

Reply text from the relay is not copied into errors, only its codes: relays
echo addresses back.

``provider_down``, by reply: a failed connect, TLS or greeting; a timeout or
a lost connection; 421 (the relay is closing the session) anywhere; any
refusal of EHLO, STARTTLS or AUTH (the account or the relay's setup, the
same for every email); a 4xx to MAIL (our sender is the same for every
email, so it is the relay that is short of something). Not down: 4xx to
RCPT or DATA (450/451/452: this recipient or this content, for now), and
every 5xx to MAIL, RCPT or DATA, which refuses this email for good.
"""

from __future__ import annotations

import contextlib
import re
import smtplib
import socket
import ssl
import threading

from infra.delivery.providers import OutcomeUnknown, PermanentSendError, RetryableSendError, SendFailed

# Only a reply about this message's envelope or content can reject the
# message for good. A 5xx to EHLO, STARTTLS or AUTH is about the account or
# the relay, which an operator can fix: retrying keeps the email alive until
# then.
_MESSAGE_PHASES = frozenset({"MAIL", "RCPT", "DATA"})

_ENHANCED_STATUS = re.compile(rb"^\s*([245]\.\d{1,3}\.\d{1,3})\b")

# Where a session the relay has closed is noticed on a reused connection,
# before any of the message's content went out.
_BEFORE_DATA = frozenset({"RSET", "MAIL", "RCPT"})


class Attempt:
    """One send: the command in progress and a deadline for the whole.

    When the deadline passes, the watchdog shuts the watched session's socket
    down (the plain socket's shutdown, under any TLS layer), which wakes the
    blocked read or write in the sending thread with an error that
    ``translate`` then reads as a timeout.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.phase = "CONNECT"
        self.timed_out = False
        # The session that ended the send able to carry another message.
        self.sound_session: smtplib.SMTP | None = None
        self._conn: smtplib.SMTP | None = None
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def watch(self, conn: smtplib.SMTP) -> None:
        self._conn = conn

    def __enter__(self) -> Attempt:
        self._timer.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._timer.cancel()
        # A watchdog already firing finishes first, so that ``timed_out`` is final.
        self._timer.join()

    def _expire(self) -> None:
        self.timed_out = True
        sock = getattr(self._conn, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


def expect(reply: tuple[int, bytes], *, wanted: int | None = None) -> None:
    """Raises ``SMTPResponseException`` unless ``reply`` is ``wanted`` (any 2xx by default)."""
    code, text = reply
    accepted = code == wanted if wanted is not None else 200 <= code < 300
    if not accepted:
        raise smtplib.SMTPResponseException(code, text)


def session_survives(error: OSError, attempt: Attempt) -> bool:
    """A refusal in a sound session: the next message can use it, after RSET."""
    return isinstance(error, smtplib.SMTPResponseException) and error.smtp_code != 421 and not attempt.timed_out


def worth_a_fresh_session(error: OSError, attempt: Attempt) -> bool:
    """The relay ended the session (421, or a dropped connection) before the message's content went out.

    Nothing of this message was accepted, so it can go once more on a new
    connection within the same send. Never after DATA began: its outcome is
    unknown, and only a later attempt, recorded as such, may repeat it.
    """
    if attempt.timed_out or attempt.phase not in _BEFORE_DATA:
        return False
    if isinstance(error, smtplib.SMTPResponseException):
        return error.smtp_code == 421
    return isinstance(error, smtplib.SMTPServerDisconnected) or _caused_by(error, ConnectionError)


def translate(error: OSError, attempt: Attempt) -> SendFailed:
    """Map an smtplib, ssl or socket error to the port's errors, by command in progress."""
    phase = attempt.phase
    if isinstance(error, smtplib.SMTPResponseException):
        return _refused(phase, error.smtp_code, error.smtp_error)
    if isinstance(error, smtplib.SMTPNotSupportedError):
        # In MAIL it is SMTPUTF8 for this message's addresses: permanent.
        if phase == "MAIL":
            return PermanentSendError("smtp server does not support SMTPUTF8")
        return RetryableSendError(f"smtp server does not support {phase}", provider_down=True)
    timed_out = attempt.timed_out or _caused_by(error, TimeoutError)
    if phase == "DATA":
        # The message may be on the relay already, its 250 lost on the way.
        cause = "timed out" if timed_out else "connection lost"
        return OutcomeUnknown(
            f"smtp {cause} during DATA; the relay may have accepted the message", provider_down=True
        )
    return RetryableSendError(_unanswered(error, phase, timed_out, attempt.seconds), provider_down=True)


def _unanswered(error: OSError, phase: str, timed_out: bool, seconds: float) -> str:
    if timed_out:
        return f"smtp timed out during {phase} (limit {seconds:g}s)"
    tls = _cause(error, ssl.SSLError)
    if tls is not None:
        reason = getattr(tls, "verify_message", None) or getattr(tls, "reason", None) or type(tls).__name__
        return f"smtp TLS failed during {phase}: {reason}"
    if _caused_by(error, ConnectionRefusedError):
        return "smtp connection refused"
    if isinstance(error, smtplib.SMTPServerDisconnected) or _caused_by(error, ConnectionError):
        return f"smtp connection lost during {phase}"
    return f"smtp {phase} failed: {error.strerror or type(error).__name__}"


def _refused(phase: str, code: int, text: bytes | str) -> SendFailed:
    raw = text.encode("utf-8", "replace") if isinstance(text, str) else text
    match = _ENHANCED_STATUS.match(raw or b"")
    detail = f"smtp {phase} refused: {code}" + (f" {match.group(1).decode()}" if match else "")
    if phase in _MESSAGE_PHASES and 500 <= code < 600:
        return PermanentSendError(detail)
    down = code == 421 or phase not in _MESSAGE_PHASES or (phase == "MAIL" and 400 <= code < 500)
    return RetryableSendError(detail, provider_down=down)


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
