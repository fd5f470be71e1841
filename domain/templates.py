"""The words of every email authledger sends: plain text and HTML, pure.

The worker calls these at send time with a freshly derived token or code;
nothing rendered here is ever stored.
"""

from __future__ import annotations

from datetime import datetime
from html import escape

from attrs import frozen


@frozen
class Rendered:
    subject: str
    text: str
    html: str


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def _html(paragraphs: list[str]) -> str:
    body = "".join(f"<p>{paragraph}</p>" for paragraph in paragraphs)
    return f'<!doctype html><html><body style="font-family: sans-serif">{body}</body></html>'


def reset_link(link: str, *, expires_at: datetime) -> Rendered:
    text = (
        "Someone asked to reset the password of your account.\n\n"
        f"To choose a new password, open this link before {_when(expires_at)}:\n\n"
        f"{link}\n\n"
        "If it was not you, ignore this email: your password stays as it is.\n"
    )
    html = _html([
        "Someone asked to reset the password of your account.",
        f'<a href="{escape(link)}">Choose a new password</a> before {escape(_when(expires_at))}.',
        "If it was not you, ignore this email: your password stays as it is.",
    ])
    return Rendered("Reset your password", text, html)


def password_changed(*, changed_at: datetime) -> Rendered:
    text = (
        f"The password of your account was changed at {_when(changed_at)}.\n\n"
        "If you did not change it, contact support at once.\n"
    )
    html = _html([
        f"The password of your account was changed at {escape(_when(changed_at))}.",
        "If you did not change it, contact support at once.",
    ])
    return Rendered("Your password was changed", text, html)


def otp_code(code: str, *, expires_at: datetime, purpose: str) -> Rendered:
    # The code stands on a line of its own so that mail clients and people
    # can pick it out and copy it without the surrounding words.
    text = (
        f"Your one-time code ({purpose}):\n\n"
        f"{code}\n\n"
        f"It is valid until {_when(expires_at)} and works once. Never share it.\n"
    )
    html = _html([
        f"Your one-time code ({escape(purpose)}):",
        f'<strong style="font-size: 1.5em; letter-spacing: 0.2em">{escape(code)}</strong>',
        f"It is valid until {escape(_when(expires_at))} and works once. Never share it.",
    ])
    return Rendered(f"Your code: {purpose}", text, html)
