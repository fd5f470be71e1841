"""The pure rules of provider feedback: what a report records, when it suppresses, when it records nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

import pytest

from domain.email import EmailQueued, ProviderBounced, ProviderComplained
from domain.errors import InvalidInput, NotFound
from domain.feedback import check_feedback, decide_feedback
from domain.suppression import AddressSuppressed

NOW = datetime(2026, 12, 5, 1, 0, tzinfo=UTC)
MESSAGE = UUID(int=7)
QUEUED = EmailQueued(MESSAGE, "reset", "reset_link", "42", UUID(int=8), "ada@example.test", NOW)
HARD = check_feedback("bounce", "smtp", permanent=True, diagnostic="550 5.1.1\r\n  no such user")


def hashed(recipient: str) -> str | None:
    return None if recipient == "[erased]" else f"k1:{'a' * 64}"


def test_a_permanent_bounce_records_the_bounce_and_suppresses_the_recipient() -> None:
    bounced, suppressed = decide_feedback([QUEUED], HARD, now=NOW, address_hash=hashed)

    assert bounced == ProviderBounced(MESSAGE, "42", NOW, "smtp", True, "550 5.1.1 no such user")
    assert suppressed == AddressSuppressed("42", MESSAGE, f"k1:{'a' * 64}", "bounce", NOW)


def test_the_same_report_again_records_nothing_but_another_does() -> None:
    history = [QUEUED, *decide_feedback([QUEUED], HARD, now=NOW, address_hash=hashed)]

    assert decide_feedback(history, HARD, now=NOW, address_hash=hashed) == []
    complained = decide_feedback(history, check_feedback("complaint", "smtp"), now=NOW, address_hash=hashed)
    assert [type(e) for e in complained] == [ProviderComplained, AddressSuppressed]


def test_a_transient_bounce_and_a_delivery_suppress_nothing() -> None:
    for feedback in (check_feedback("bounce", "generic", permanent=False), check_feedback("delivered", "generic")):
        assert [type(e).__name__ for e in decide_feedback([QUEUED], feedback, now=NOW, address_hash=hashed)] == [
            {"bounce": "ProviderBounced", "delivered": "ProviderDelivered"}[feedback.kind]]


def test_an_erased_recipient_is_not_suppressed_and_an_unknown_email_is_not_found() -> None:
    erased = EmailQueued(MESSAGE, "reset", "reset_link", "42", UUID(int=8), "[erased]", NOW)

    assert [type(e) for e in decide_feedback([erased], HARD, now=NOW, address_hash=hashed)] == [ProviderBounced]
    with pytest.raises(NotFound):
        decide_feedback([], HARD, now=NOW, address_hash=hashed)


def test_a_diagnostic_is_one_printable_line_and_a_bad_report_is_refused() -> None:
    assert check_feedback("bounce", "generic", diagnostic="550\x00 no\tsuch \ud800user").diagnostic == \
        "550 no such user"
    for kind, permanent, diagnostic in (("opened", False, ""), ("bounce", "yes", ""), ("bounce", True, "x" * 1001)):
        with pytest.raises(InvalidInput):
            check_feedback(kind, "generic", permanent=permanent, diagnostic=diagnostic)
