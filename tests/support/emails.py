"""One rendered email for the provider tests: the sign-in code email, as a worker would hand it over."""

from __future__ import annotations

import uuid

from infra.delivery.providers import OutboundEmail


def a_code_email(code: str = "731904") -> OutboundEmail:
    """A fresh message id each call; ``code`` stands for the secret a real email carries."""
    return OutboundEmail(
        message_id=uuid.uuid4(),
        sender="Authledger <no-reply@example.com>",
        recipient="alice@example.com",
        subject="Your sign-in code",
        text_body=f"Your code is {code}.",
        html_body=f"<p>Your code is <b>{code}</b>.</p>",
    )
