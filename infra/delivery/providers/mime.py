"""The MIME message every provider that speaks RFC 5322 writes (SMTP, Maildir)."""

from __future__ import annotations

import email.policy
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime

from infra.delivery.providers import OutboundEmail, PermanentSendError, message_id_header

# Bodies are encoded to 7-bit (quoted-printable or base64 when needed) so the
# message passes any relay, including one without 8BITMIME.
_BUILD_POLICY = email.policy.default.clone(cte_type="7bit")


def render_mime(outbound: OutboundEmail, *, return_path: str | None = None) -> EmailMessage:
    """A multipart/alternative message: the text part first, the html part preferred.

    Raises ``PermanentSendError`` when a header cannot be written (a line break
    in the subject or an address): the same email would fail every time.
    """
    message = EmailMessage(policy=_BUILD_POLICY)
    try:
        if return_path is not None:
            message["Return-Path"] = f"<{return_path}>"
        message["From"] = outbound.sender
        message["To"] = outbound.recipient
        message["Subject"] = outbound.subject
        message["Date"] = format_datetime(datetime.now(UTC))
        message["Message-ID"] = message_id_header(outbound.message_id)
        message["Auto-Submitted"] = "auto-generated"  # RFC 3834: no vacation replies to a reset link
    except (ValueError, IndexError) as e:
        # The header parser's message may quote the value; ours names the rule.
        raise PermanentSendError("invalid email header (line break or malformed address)") from e
    message.set_content(outbound.text_body, subtype="plain")
    message.add_alternative(outbound.html_body, subtype="html")
    return message
