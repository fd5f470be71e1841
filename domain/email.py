"""Events of one outbound email, the ``email:<message_id>`` stream.

An email is queued by the flow that needs it (a reset link, an OTP code, a
"password changed" notice) and then leased, sent, skipped or abandoned by
workers. The email events never carry the token or code: the worker derives
them again at send time from the request's fresh state.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from attrs import frozen


def email_stream(message_id: UUID) -> str:
    return f"email:{message_id}"


@frozen
class EmailQueued:
    message_id: UUID
    flow: str  # "reset" or "otp": which user stream holds the request
    template: str  # "reset_link", "password_changed" or "otp_code"
    user_id: str
    request_id: UUID  # the reset request or OTP challenge this email serves
    recipient: str
    available_at: datetime


@frozen
class LeaseClaimed:
    message_id: UUID
    lease_owner: str
    lease_token: UUID
    claimed_at: datetime
    lease_expires_at: datetime
    attempt: int


@frozen
class LeaseExpired:
    message_id: UUID
    lease_owner: str
    lease_token: UUID
    expired_at: datetime


@frozen
class LeaseReleased:
    """A worker gave back a message it had claimed but not sent: it was stopping, or its provider was down."""

    message_id: UUID
    lease_owner: str
    lease_token: UUID
    released_at: datetime
    # True when the claim's attempt is given back too (the provider was down,
    # nothing was tried). Events recorded before this field read False.
    attempt_returned: bool = False


@frozen
class SendAttemptFailed:
    message_id: UUID
    lease_token: UUID
    attempt: int
    failed_at: datetime
    error: str
    retryable: bool
    # None when the failure is permanent: the message is then ``failed``.
    retry_at: datetime | None
    # True when the request may have reached the provider (a timeout after
    # sending); the retry reuses the same idempotency key either way.
    outcome_unknown: bool = False


@frozen
class ProviderAccepted:
    message_id: UUID
    lease_token: UUID
    attempt: int
    accepted_at: datetime
    provider: str
    provider_message_id: str
    key_id: str | None  # which token key rendered the secret, if any
    # The version of its tenant's settings the email was rendered with (0: the deployment's alone); None for
    # emails sent before tenants had settings beyond their purposes.
    settings_version: int | None = None
    locale: str | None = None  # the language the email was written in; None on events from before languages


@frozen
class DeliverySkipped:
    message_id: UUID
    skipped_at: datetime
    reason: str  # "superseded", "expired", "consumed", "verified", "erased", ...
    lease_token: UUID | None = None


@frozen
class DeliveryAbandoned:
    message_id: UUID
    abandoned_at: datetime
    attempts: int
    last_error: str
    lease_token: UUID | None = None


@frozen
class DeliveryOutcomeUnknown:
    """The message may have reached the provider more than once already: it is not sent again.

    A provider that cannot drop a repeat (SMTP) is asked again after an
    unknown outcome (a connection lost after DATA, a worker killed mid-send)
    only ``DeliveryPolicy.unknown_outcome_retries`` times; past that, each
    further try could be one more copy of the same link or code in the
    user's inbox. An operator who finds it was never received re-drives it.
    """

    message_id: UUID
    settled_at: datetime
    unknown_outcomes: int
    last_error: str
    lease_token: UUID | None = None


@frozen
class DeliveryRedriven:
    """An operator sent an abandoned or failed message back to the queue, saying why.

    The message is due again at once and its attempts count again from one,
    so an optional attempt cap allows the re-driven message a fresh budget.
    """

    message_id: UUID
    redriven_at: datetime
    actor: str
    reason: str


# What the provider told afterwards (its webhook, or a bounce report read
# from a mailbox). ``source`` names the channel: "generic", "postmark",
# "sendgrid" or "smtp". ``user_id`` is the message's (scoped) user, so that a
# diagnostic, which often repeats the address, is sealed under their key.
FEEDBACK_SOURCES = ("generic", "postmark", "sendgrid", "smtp")


@frozen
class ProviderDelivered:
    """The provider handed the email to the recipient's mail server."""

    message_id: UUID
    user_id: str
    delivered_at: datetime
    source: str


@frozen
class ProviderBounced:
    """The recipient's mail server refused the email: for good (``permanent``) or for now."""

    message_id: UUID
    user_id: str
    bounced_at: datetime
    source: str
    permanent: bool
    diagnostic: str  # the server's own words, e.g. "550 5.1.1 user unknown"; personal data (sealed)


@frozen
class ProviderComplained:
    """The recipient marked the email as spam."""

    message_id: UUID
    user_id: str
    complained_at: datetime
    source: str
