"""The words of every email authledger sends: plain text and HTML, pure.

The texts themselves are templates (``string.Template``, ``$name``
placeholders) that infra loads, from the package or from an operator's
folder, and passes in; this module only fills them. The worker calls these
at send time with a freshly derived token or code; nothing rendered here is
ever stored.
"""

from __future__ import annotations

from datetime import datetime
from html import escape
from string import Template

from attrs import frozen

PARTS = ("subject", "txt", "html")


@frozen
class Placeholders:
    """What one email's templates may use, and what its bodies must use."""

    allowed: frozenset[str]
    required_in_bodies: frozenset[str]  # the text and html parts both carry these; a subject need not


# Each email by name: the link or code is what the email is for, so a body
# that leaves it out is refused when the templates load, not found out by a user.
EMAILS: dict[str, Placeholders] = {
    "reset_link": Placeholders(frozenset({"link", "expires_at"}), frozenset({"link"})),
    "password_changed": Placeholders(frozenset({"changed_at"}), frozenset()),
    "otp_code": Placeholders(frozenset({"code", "code_name", "purpose", "expires_at"}), frozenset({"code"})),
}


@frozen
class EmailTemplate:
    """One email's three parts, as template texts."""

    subject: str
    txt: str
    html: str


@frozen
class EmailTemplates:
    """The templates of every email, one field per name in ``EMAILS``."""

    reset_link: EmailTemplate
    password_changed: EmailTemplate
    otp_code: EmailTemplate


@frozen
class Rendered:
    subject: str
    text: str
    html: str


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def _fill(template: EmailTemplate, values: dict[str, str]) -> Rendered:
    # Values go into the HTML part escaped: a link or display text never becomes markup.
    escaped = {name: escape(value) for name, value in values.items()}
    return Rendered(
        Template(template.subject).substitute(values).strip(),
        Template(template.txt).substitute(values),
        Template(template.html).substitute(escaped),
    )


def reset_link(template: EmailTemplate, link: str, *, expires_at: datetime) -> Rendered:
    return _fill(template, {"link": link, "expires_at": _when(expires_at)})


def password_changed(template: EmailTemplate, *, changed_at: datetime) -> Rendered:
    return _fill(template, {"changed_at": _when(changed_at)})


def otp_code(template: EmailTemplate, code: str, *, expires_at: datetime, code_name: str) -> Rendered:
    """The code email; ``code_name`` is its purpose's display text as the tenant declared it ("sign-in code").

    The purpose a caller named never appears: ``$purpose``, which templates
    written before purposes were declared may use, is the display text too.
    """
    values = {"code": code, "code_name": code_name, "purpose": code_name, "expires_at": _when(expires_at)}
    return _fill(template, values)
