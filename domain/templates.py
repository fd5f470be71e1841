"""The words of every email authledger sends: plain text and HTML, in the languages there are texts for, pure.

The texts themselves are templates (``string.Template``, ``$name``
placeholders) that infra loads, from the package or from an operator's
folder, and passes in; this module picks the language (``localized``) and
fills them. The worker calls these at send time with a freshly derived token
or code; nothing rendered here is ever stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from html import escape
from string import Template

from attrs import frozen

from domain.locales import ENGLISH, best_locale, fallback_chain

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


# One locale's template texts by file name ("reset_link.txt"), locale by locale ("en", "de").
TemplateFiles = Mapping[str, Mapping[str, str]]


@frozen
class TemplateSets:
    """The template texts of every language: English has every file, another language any of them.

    A file a language lacks is taken from the next language of the email's
    fallback chain (``domain.locales.fallback_chain``), so a translation that
    misses a part still sends, never fails.
    """

    by_locale: TemplateFiles

    def overlaid(self, overrides: TemplateFiles | None) -> TemplateSets:
        """These sets with ``overrides``' files over them, locale by locale (a tenant's own texts, checked
        when they were set)."""
        if not overrides:
            return self
        merged = {locale: dict(files) for locale, files in self.by_locale.items()}
        for locale, files in overrides.items():
            merged.setdefault(locale, {}).update(files)
        return TemplateSets(merged)


def localized(sets: TemplateSets, email: str, *, requested_locale: str | None,
              tenant_default_locale: str | None = None,
              template_overrides: TemplateFiles | None = None) -> tuple[str, EmailTemplate]:
    """The language ``email`` is written in and its three parts: the best of the request's language, the
    tenant's default and English among those with a text for the email, each part from the first language
    of the chain that has it. ``template_overrides`` (a tenant's own texts) go over ``sets``, keyed by
    normalised tags and checked when they were set (``infra.emails.templates.check_overrides``)."""
    by_locale = sets.overlaid(template_overrides).by_locale
    names = [f"{email}.{part}" for part in PARTS]
    available = [locale for locale, files in by_locale.items() if any(name in files for name in names)]
    chosen = best_locale(requested_locale, tenant_default_locale, available)
    chain = [chosen, *fallback_chain(requested_locale, tenant_default_locale), ENGLISH]
    parts = {}
    for part, name in zip(PARTS, names, strict=True):
        parts[part] = next(by_locale[locale][name] for locale in chain if name in by_locale.get(locale, {}))
    return chosen, EmailTemplate(**parts)


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
