"""The email provider port: one email in, a receipt or a ``SendFailed`` out.

Workers hand a rendered ``OutboundEmail`` to a ``Mailer`` and record what
comes back. The port is deliberately narrow so that SMTP, a Maildir on disk
and an HTTP JSON API (and the fakes in tests) are interchangeable:

- ``send`` either returns a ``ProviderReceipt`` (the provider accepted the
  email) or raises a ``SendFailed`` that says whether trying again can help
  and whether the provider may have accepted the email anyway.
- The message id is the idempotency key. Sending the same message id twice
  must not deliver twice wherever the provider lets us prevent it (Maildir,
  HTTP ``Idempotency-Key``); SMTP can only carry it as the Message-ID header.
- ``provider_down`` on a ``SendFailed`` says the failure is about the
  provider (unreachable, overloaded, refusing every email), not this email.
  The worker's circuit breaker opens on such failures across different
  messages; a refusal of one email never counts towards it.
- ``send_async`` (the ``AsyncMailer`` port) has the same contract as
  ``send``. A worker keeps up to its window of calls in flight and passes the
  window to the provider's constructor as ``window``: the number of
  connections worth keeping open.
- Error messages are short, fixed phrases plus status codes. They end up in
  events and logs, so they never quote the email: its body holds a live
  token or code.
"""

from __future__ import annotations

from email.headerregistry import Address, AddressHeader, HeaderRegistry
from typing import Protocol, runtime_checkable
from uuid import UUID

from attrs import field, frozen

from domain.addresses import address_problem
from domain.errors import AuthledgerError, ConfigError

__all__ = [
    "AsyncMailer",
    "Mailer",
    "OutboundEmail",
    "OutcomeUnknown",
    "PermanentSendError",
    "ProviderReceipt",
    "RetryableSendError",
    "SendFailed",
    "envelope_address",
    "message_id_header",
    "sender_address",
    "single_recipient",
]


@frozen
class OutboundEmail:
    """One rendered email, ready for a provider.

    The bodies carry a secret (a reset link or a code) and the recipient is
    personal data, so none of them appear in ``repr``: an email that ends up
    in a log line or a traceback shows its id and subject only.
    """

    message_id: UUID
    sender: str
    recipient: str = field(repr=False)
    subject: str
    text_body: str = field(repr=False)
    html_body: str = field(repr=False)
    reply_to: str | None = None  # one plain address (a tenant's setting), for the Reply-To header
    locale: str = "en"  # the language the email is written in: its Content-Language


@frozen
class ProviderReceipt:
    """The provider accepted the email; ``provider_message_id`` is its id for it."""

    provider: str
    provider_message_id: str


@runtime_checkable
class Mailer(Protocol):
    """Delivers one email to a provider.

    ``name`` is the provider's stable name as recorded in ``ProviderAccepted``.
    ``timeout_seconds`` is the longest one ``send`` is expected to block;
    leases are sized from it (lease > timeout + safety margin).
    ``idempotent`` says the provider itself drops a second send of a message
    id, so a worker may send several messages before recording them.
    """

    name: str
    timeout_seconds: float
    idempotent: bool

    def send(self, email: OutboundEmail) -> ProviderReceipt:
        """Send ``email`` once, keyed by ``email.message_id``.

        Returns the receipt when the provider accepted the email, also when it
        had already accepted this message id before. Raises ``SendFailed``
        otherwise, never a driver exception.
        """
        ...


@runtime_checkable
class AsyncMailer(Protocol):
    """``Mailer`` for an event loop: many sends in flight on one provider object.

    ``send_async`` keeps ``send``'s contract (a receipt, or ``SendFailed``
    and never a driver exception). ``aclose`` releases the connections, from
    inside the loop that used them.
    """

    name: str
    timeout_seconds: float
    idempotent: bool

    async def send_async(self, email: OutboundEmail) -> ProviderReceipt:
        """Send ``email`` once, keyed by ``email.message_id``, as ``Mailer.send`` does."""
        ...

    async def aclose(self) -> None:
        """Close what ``send_async`` opened; the mailer is not used afterwards."""
        ...


_HEADERS = HeaderRegistry()


def sender_address(sender: str) -> Address:
    """The configured sender as one address object, for the From header.

    ``AUTHLEDGER_SENDER`` may carry a display name (``authledger <no-reply@...>``);
    it is the operator's text, not a user's, but is still held to exactly one
    address, so that From is built from an object as To is.
    """
    header = _HEADERS("From", sender)
    assert isinstance(header, AddressHeader)  # the registry's class for From
    addresses = header.addresses
    if len(addresses) != 1 or not addresses[0].domain:
        raise ConfigError(f"sender {sender!r} must hold exactly one email address")
    return addresses[0]


def envelope_address(sender: str) -> str:
    """The bare address of a configured sender, for SMTP's MAIL FROM and Maildir's Return-Path.

    The display name belongs in the From header only: an envelope address is an addr-spec.
    """
    return sender_address(sender).addr_spec


def single_recipient(email: OutboundEmail) -> Address:
    """The one recipient of ``email``, as an address object built from its checked parts.

    Every provider takes its recipient from here: the MIME ``To`` header,
    SMTP's RCPT TO and the HTTP provider's ``to``. The address must pass the
    domain's one rule again, because an email queued before that rule was
    strict (or by a writer that skipped it) must not reach a header parser
    that would decode it into more recipients. Such an email fails for good
    (``PermanentSendError``, recorded as a permanent failure), since every
    attempt would meet the same rule. The message names the rule, never the
    address.
    """
    problem = address_problem(email.recipient)
    if problem is not None:
        raise PermanentSendError(f"the recipient is not a single plain address: {problem}")
    local, domain = email.recipient.split("@")
    # From parts, not parsed: a dot-atom and a host name need no quoting, so
    # ``addr_spec`` reads exactly as the input did.
    return Address(username=local, domain=domain)


def message_id_header(message_id: UUID) -> str:
    """The RFC 5322 Message-ID that every provider puts on ``message_id``."""
    return f"<{message_id}@authledger>"


class SendFailed(AuthledgerError):
    """The email provider did not accept the email."""

    http_status = 502
    exit_code = 69  # EX_UNAVAILABLE
    problem_type = "send-failed"

    def __init__(
        self, message: str | None, retryable: bool, outcome_unknown: bool = False, *, provider_down: bool = False
    ) -> None:
        if outcome_unknown and not retryable:
            # An unknown outcome can only be settled by asking again with the
            # same idempotency key; giving up would leave it unknown forever.
            raise ValueError("an unknown outcome is always retryable")
        if provider_down and not retryable:
            # A provider that is down refuses nothing for good.
            raise ValueError("a provider outage is always retryable")
        super().__init__(message)
        self.retryable = retryable
        self.outcome_unknown = outcome_unknown
        # True when the failure says the provider is unavailable (refused or
        # lost connections, timeouts, 5xx/429, SMTP 421), not this email.
        self.provider_down = provider_down


class RetryableSendError(SendFailed):
    """The provider did not accept the email this time; a later attempt may succeed."""

    def __init__(self, message: str | None = None, *, provider_down: bool = False) -> None:
        super().__init__(message, retryable=True, provider_down=provider_down)


class PermanentSendError(SendFailed):
    """The provider refused the email; sending it again will not help."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message, retryable=False)


class OutcomeUnknown(RetryableSendError):
    """The request may have reached the provider; retry with the same idempotency key."""

    def __init__(self, message: str | None = None, *, provider_down: bool = False) -> None:
        SendFailed.__init__(self, message, retryable=True, outcome_unknown=True, provider_down=provider_down)
