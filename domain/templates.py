"""The words of every email authledger sends: plain text and HTML, pure.

The texts themselves are templates (``string.Template``, ``$name``
placeholders) that infra loads, from the package or from an operator's
folder, and passes in; this module only fills them. The worker calls these
at send time with a freshly derived token or code; nothing rendered here is
ever stored.
"""

from __future__ import annotations

from collections.abc import Mapping
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


# What every email may name: the tenant's (or the deployment's) product and where its users get help.
BRANDING = frozenset({"product_name", "support_contact"})
# Each email by name: the link or code is what the email is for, so a body
# that leaves it out is refused when the templates load, not found out by a user.
EMAILS: dict[str, Placeholders] = {
    "reset_link": Placeholders(frozenset({"link", "expires_at"}) | BRANDING, frozenset({"link"})),
    "password_changed": Placeholders(frozenset({"changed_at"}) | BRANDING, frozenset()),
    "otp_code": Placeholders(frozenset({"code", "code_name", "purpose", "expires_at"}) | BRANDING,
                             frozenset({"code"})),
}
FILES = frozenset(f"{email}.{part}" for email in EMAILS for part in PARTS)


def template_problem(file_name: str, text: str) -> str | None:
    """Why ``text`` may not be the template ``file_name`` (``reset_link.subject``...), or None.

    The one check of a template, whether it comes from the deployment's
    folder or a tenant's settings: a name authledger sends, well-formed
    placeholders, only those the email has, the link or code in each body,
    a subject of one line.
    """
    email, _, part = file_name.partition(".")
    if file_name not in FILES:
        return f"is not one authledger sends; the names are {', '.join(sorted(FILES))}"
    allowed, required = EMAILS[email].allowed, EMAILS[email].required_in_bodies
    template = Template(text)
    if not template.is_valid():
        return "has a malformed placeholder (write $$ for a dollar sign)"
    used = set(template.get_identifiers())
    if unknown := sorted(used - allowed):
        return f"uses ${', $'.join(unknown)}; it may use ${', $'.join(sorted(allowed))}"
    if part != "subject" and (missing := sorted(required - used)):
        return f"lacks ${', $'.join(missing)}, which the email exists to carry"
    if part == "subject" and len(text.strip().splitlines()) != 1:
        return "must be one line"
    return None


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


@frozen
class Brand:
    """What every email may name besides its own values: the tenant's product and support contact."""

    product_name: str = "authledger"
    support_contact: str = ""


def _fill(template: EmailTemplate, values: dict[str, str], brand: Brand) -> Rendered:
    # Values go into the HTML part escaped: a link or display text never becomes markup.
    values = {**values, "product_name": brand.product_name, "support_contact": brand.support_contact}
    escaped = {name: escape(value) for name, value in values.items()}
    return Rendered(
        Template(template.subject).substitute(values).strip(),
        Template(template.txt).substitute(values),
        Template(template.html).substitute(escaped),
    )


def reset_link(template: EmailTemplate, link: str, *, expires_at: datetime, brand: Brand = Brand()) -> Rendered:
    return _fill(template, {"link": link, "expires_at": _when(expires_at)}, brand)


def password_changed(template: EmailTemplate, *, changed_at: datetime, brand: Brand = Brand()) -> Rendered:
    return _fill(template, {"changed_at": _when(changed_at)}, brand)


def otp_code(template: EmailTemplate, code: str, *, expires_at: datetime, code_name: str,
             brand: Brand = Brand()) -> Rendered:
    """The code email; ``code_name`` is its purpose's display text as the tenant declared it ("sign-in code").

    The purpose a caller named never appears: ``$purpose``, which templates
    written before purposes were declared may use, is the display text too.
    """
    values = {"code": code, "code_name": code_name, "purpose": code_name, "expires_at": _when(expires_at)}
    return _fill(template, values, brand)


def with_files(templates: EmailTemplates, files: Mapping[str, str]) -> EmailTemplates:
    """``templates`` with some files (``reset_link.subject`` -> text, each passing ``template_problem``) replaced:
    a tenant's overrides over the deployment's templates."""
    if not files:
        return templates
    emails = {}
    for email in EMAILS:
        template: EmailTemplate = getattr(templates, email)
        parts = {part: files.get(f"{email}.{part}", getattr(template, part)) for part in PARTS}
        emails[email] = EmailTemplate(**parts)
    return EmailTemplates(**emails)
