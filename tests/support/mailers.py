"""A provider for worker tests that keeps what it is sent, honouring the idempotency key."""

from __future__ import annotations

import threading
from collections import Counter

from infra.delivery.providers import OutboundEmail, PermanentSendError, ProviderReceipt, RetryableSendError


class RecordingMailer:
    """Accepts every email; a replay of a message id is one logical send, as with Resend."""

    name = "recording"
    idempotent = True
    timeout_seconds = 1.0

    def __init__(self) -> None:
        self.emails: list[OutboundEmail] = []
        self.calls: Counter[str] = Counter()
        self.fail_next = 0
        self._lock = threading.Lock()

    def send(self, email: OutboundEmail) -> ProviderReceipt:
        with self._lock:
            self.calls[str(email.message_id)] += 1
            if self.fail_next:
                self.fail_next -= 1
                raise RetryableSendError("provider busy (421)")
            if self.calls[str(email.message_id)] == 1 or all(
                e.message_id != email.message_id for e in self.emails
            ):
                self.emails.append(email)
        return ProviderReceipt(self.name, f"rec-{email.message_id}")

    def sent_to(self, recipient: str) -> list[OutboundEmail]:
        return [e for e in self.emails if e.recipient == recipient]


class RefusingMailer(RecordingMailer):
    """Refuses every email for good, as a provider does an address that does not exist."""

    def send(self, email: OutboundEmail) -> ProviderReceipt:
        with self._lock:
            self.calls[str(email.message_id)] += 1
        raise PermanentSendError("550 no such user")
