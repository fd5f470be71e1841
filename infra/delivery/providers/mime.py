"""The MIME message every provider that speaks RFC 5322 writes (SMTP, Maildir)."""

from __future__ import annotations

import email.policy
from datetime import UTC, datetime
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import format_datetime

from domain.errors import ConfigError
from infra.delivery.providers import (
    OutboundEmail,
    PermanentSendError,
    message_id_header,
    sender_address,
    single_recipient,
)

# Bodies are encoded to 7-bit (quoted-printable or base64 when needed) so the
# message passes any relay, including one without 8BITMIME.
_BUILD_POLICY = email.policy.default.clone(cte_type="7bit")


def render_mime(outbound: OutboundEmail, *, return_path: str | None = None) -> EmailMessage:
    """A multipart/alternative message: the text part first, the html part preferred.

    Raises ``PermanentSendError`` when a header cannot be written (a line break
    in the subject or an address) or the recipient is not a single plain
    address: the same email would fail every time. ``From`` and ``To`` are
    set from address objects, ``To`` from the parts of the checked address,
    so nothing in it can be decoded into recipients of its own (as an
    encoded-word in a plain string would be); the header is then read back
    to hold exactly that one address.
    """
    recipient = single_recipient(outbound)
    message = EmailMessage(policy=_BUILD_POLICY)
    try:
        if return_path is not None:
            message["Return-Path"] = f"<{return_path}>"
        message["From"] = sender_address(outbound.sender)
        message["To"] = recipient
        if outbound.reply_to is not None:
            message["Reply-To"] = Address(addr_spec=outbound.reply_to)
        message["Subject"] = outbound.subject
        message["Date"] = format_datetime(datetime.now(UTC))
        message["Message-ID"] = message_id_header(outbound.message_id)
        message["Auto-Submitted"] = "auto-generated"  # RFC 3834: no vacation replies to a reset link
    except (ValueError, IndexError, ConfigError) as e:
        # The header parser's message may quote the value; ours names the rule.
        raise PermanentSendError("invalid email header (line break or malformed address)") from e
    if [a.addr_spec for a in message["To"].addresses] != [recipient.addr_spec]:
        # Cannot happen for an address the rule accepts; if the header
        # machinery ever disagrees, no email goes out rather than two.
        raise PermanentSendError("the To header does not hold exactly the one recipient")
    message.set_content(outbound.text_body, subtype="plain")
    message.add_alternative(outbound.html_body, subtype="html")
    # RFC 3282: the language the email is written in. Set after the bodies: set_content drops Content-* headers.
    message["Content-Language"] = outbound.locale
    return message
