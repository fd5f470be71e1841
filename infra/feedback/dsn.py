"""RFC 3464 delivery status notifications: the bounces an SMTP relay mails back to the envelope sender.

A DSN is a ``multipart/report; report-type=delivery-status`` (RFC 6522):
a human-readable part, a ``message/delivery-status`` part with one block of
fields per recipient (``Action``, ``Status``, ``Diagnostic-Code``), and the
original message or its headers (``message/rfc822`` or
``text/rfc822-headers``). Python's ``email`` package parses all of it.

The email is found by the ``Message-ID`` authledger gave it
(``<message id@authledger>``, ``infra.delivery.providers.message_id_header``)
in the returned headers, else in the report's ``In-Reply-To`` or
``References``, else by a VERP return path: an address of the form
``local+<message id>@domain`` in ``To``, ``Delivered-To`` or
``X-Original-To``. ``Action: failed`` with a 5.x.x status is a permanent
bounce, with 4.x.x a transient one; ``delayed`` is transient;
``delivered`` and ``relayed`` are deliveries.
"""

from __future__ import annotations

import email
import re
from email.message import Message
from email.parser import HeaderParser
from uuid import UUID

from domain.errors import InvalidInput
from domain.feedback import Feedback, check_feedback
from infra.services.feedback import MessageRef

OUR_MESSAGE_ID = re.compile(r"<([0-9a-fA-F-]{36})@authledger>")
VERP = re.compile(r"\+([0-9a-fA-F-]{36})@")
STATUS = re.compile(r"([245])\.\d{1,3}\.\d{1,3}")
MAX_REPORT_BYTES = 1 << 20


def _returned_headers(report: Message) -> list[Message]:
    found: list[Message] = []
    for part in report.walk():
        kind = part.get_content_type()
        if kind == "text/rfc822-headers":
            payload = part.get_payload(decode=True)
            text = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else str(part.get_payload())
            found.append(HeaderParser().parsestr(text))
        elif kind == "message/rfc822":
            inner = part.get_payload()
            found += [m for m in (inner if isinstance(inner, list) else [inner]) if isinstance(m, Message)]
    return found


def _message_ref(report: Message) -> MessageRef:
    for headers in _returned_headers(report):
        if (found := OUR_MESSAGE_ID.search(str(headers.get("Message-ID", "")))) is not None:
            return MessageRef(message_id=UUID(found.group(1)))
    for name in ("In-Reply-To", "References"):
        if (found := OUR_MESSAGE_ID.search(str(report.get(name, "")))) is not None:
            return MessageRef(message_id=UUID(found.group(1)))
    for name in ("To", "Delivered-To", "X-Original-To"):
        if (found := VERP.search(str(report.get(name, "")))) is not None:
            return MessageRef(message_id=UUID(found.group(1)))
    raise InvalidInput("the report names no email of authledger (no Message-ID <...@authledger>, no VERP address)")


def _recipient_fields(report: Message) -> list[Message]:
    for part in report.walk():
        if part.get_content_type() == "message/delivery-status":
            blocks = part.get_payload()
            # The first block is about the message as a whole; each block after it is about one recipient.
            return [b for b in (blocks if isinstance(blocks, list) else []) if isinstance(b, Message)][1:]
    raise InvalidInput("the report has no message/delivery-status part")


def _feedback(fields: Message) -> Feedback:
    action = str(fields.get("Action", "")).strip().lower()
    status = STATUS.search(str(fields.get("Status", "")))
    diagnostic = " ".join(str(fields.get("Diagnostic-Code", "")).split())
    said = " ".join(filter(None, [status.group(0) if status else "", diagnostic]))[:1000]
    if action in ("delivered", "relayed", "expanded"):
        return check_feedback("delivered", "smtp")
    if action == "delayed":
        return check_feedback("bounce", "smtp", permanent=False, diagnostic=said)
    if action == "failed":
        return check_feedback("bounce", "smtp", permanent=status is None or status.group(1) == "5", diagnostic=said)
    raise InvalidInput("the report's Action is none of failed, delayed, delivered, relayed, expanded")


def read_report(raw: bytes) -> tuple[MessageRef, Feedback]:
    """The email a delivery status notification is about, and what it reports; ``InvalidInput`` for anything
    that is not an RFC 3464 report about an email of ours (authledger sends to one recipient per email: the
    first recipient block tells)."""
    if len(raw) > MAX_REPORT_BYTES:
        raise InvalidInput(f"the file is over {MAX_REPORT_BYTES} bytes: no bounce report is that large")
    report = email.message_from_bytes(raw)
    if report.get_content_type() != "multipart/report" or report.get_param("report-type") != "delivery-status":
        raise InvalidInput("not a delivery status notification (multipart/report; report-type=delivery-status)")
    blocks = _recipient_fields(report)
    if not blocks:
        raise InvalidInput("the report's delivery-status part holds no recipient")
    return _message_ref(report), _feedback(blocks[0])
