"""The rules a tenant's branding passes, and the deployment's too: one function per kind of value.

A tenant may name its own reset page, sender, reply-to, product name and
support contact (``domain.tenants.TenantConfigured``). Each is judged by the
same function that judges the deployment-wide setting it stands in for
(``infra.config.values`` calls these), so that no path (CLI, HTTP, config)
accepts what another refuses. Every rule here guards a takeover path or an
email header: a reset link to a page in clear text, a From that reads as
someone else (``"bank@x.com" <evil@y.com>``), a line break in a header.
Messages name the rule broken; only a URL, never a secret, is quoted, masked.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from domain.addresses import address_problem
from domain.characters import has_at_lookalike, has_bidi_controls, readable_form
from domain.errors import InvalidInput

# Locales whose texts ship with authledger; a tenant's default is one of them.
SHIPPED_LOCALES = ("en", "de")
MAX_DISPLAY_NAME = 64  # a From line's name, short enough to read whole in a mail client's list
MAX_PRODUCT_NAME = 60
MAX_URL = 2000  # what every browser and mail client keeps whole
# The characters of address syntax: in a display name they make a second address for some parser.
_ADDRESS_SYNTAX = frozenset('"<>@,;:\\()[]')


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` names this machine: localhost, a ``.localhost`` name (RFC 6761) or a
    loopback address. Nothing is resolved: the check reads the configuration, not the network."""
    if not host:
        return False
    host = host.lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_scheme_and_host(raw: str, schemes: tuple[str, ...]) -> tuple[str, str] | None:
    """(scheme, host) of ``raw`` when it is a URL of one of ``schemes`` with a host and a valid port; else None."""
    try:
        parts = urlsplit(raw.strip())
        scheme, host = parts.scheme.lower(), parts.hostname
        parts.port  # noqa: B018 - read for its check: an invalid port raises ValueError
    except ValueError:
        return None
    return (scheme, host) if scheme in schemes and host else None


def web_url_problem(raw: str) -> str | None:
    """Why ``raw`` may not be a URL a credential travels to (a reset page, a provider), or None.

    Floor: a reset link carries the token; in clear text only to this machine.
    """
    found = url_scheme_and_host(raw, ("http", "https"))
    if found is None:
        return "must be a URL with a host, starting with http:// or https://"
    if found[0] != "https" and not is_loopback(found[1]):
        return "must use https:// (http:// only for localhost or a loopback address)"
    if len(raw.strip()) > MAX_URL or not raw.strip().isprintable() or " " in raw.strip():
        return f"must be one printable URL of at most {MAX_URL} characters, without spaces"
    return None


def check_reset_url(raw: object) -> str:
    """A reset page URL (``AUTHLEDGER_RESET_URL`` or a tenant's), trimmed; ``InvalidInput`` naming the rule."""
    if not isinstance(raw, str) or (problem := web_url_problem(raw)) is not None:
        raise InvalidInput(f"the reset URL {problem or 'must be a URL'}")
    return raw.strip()


def display_name_problem(name: str) -> str | None:
    """Why ``name`` may not be the display name of a From line, or None.

    Refused: anything of address syntax (quotes, angle brackets, an @ in any
    form, commas...), so that a name can never read as, or hide, an address;
    an encoded-word; control and bidirectional characters.
    """
    if not name.strip() or len(name) > MAX_DISPLAY_NAME:
        return f"must be 1-{MAX_DISPLAY_NAME} characters"
    if not name.isprintable() or has_bidi_controls(name):
        return "must be one line of printable text without bidirectional controls"
    readable = readable_form(name) or name
    if any(ch in _ADDRESS_SYNTAX for ch in readable) or has_at_lookalike(name):
        return 'must not hold an address or address syntax (quotes, <, >, @, commas, ;, :, brackets)'
    if "=?" in name:
        return "must not hold an encoded-word (=?)"
    return None


def check_sender_name(name: object) -> str:
    """A From line's display name, trimmed; ``InvalidInput`` naming the rule."""
    if not isinstance(name, str) or (problem := display_name_problem(name)) is not None:
        raise InvalidInput(f"the sender name {problem or 'must be text'}")
    return name.strip()


def check_mailbox(value: object, what: str) -> str:
    """One plain address for ``what`` (the sender, the reply-to): the recipient's rule (``domain.addresses``)."""
    problem = address_problem(value)
    if problem is not None or not isinstance(value, str):
        raise InvalidInput(f"{what} must be a single plain email address like name@example.com: {problem}")
    return value


def split_sender(raw: object) -> tuple[str | None, str]:
    """(display name or None, address) of ``name@example.com`` or ``Display Name <name@example.com>``.

    The deployment's ``AUTHLEDGER_SENDER`` is held to this, and a tenant's
    sender name and address are the same two parts given apart.
    """
    if not isinstance(raw, str):
        raise InvalidInput("the sender must be text")
    text = raw.strip()
    if text.endswith(">") and "<" in text:
        name, _, address = text[:-1].rpartition("<")
        return (check_sender_name(name) if name.strip() else None), check_mailbox(address, "the sender")
    return None, check_mailbox(text, "the sender")


def check_product_name(value: object) -> str:
    """The product name emails name (``$product_name``), trimmed: one short line of plain text."""
    text = value.strip() if isinstance(value, str) else ""
    if not text or len(text) > MAX_PRODUCT_NAME:
        raise InvalidInput(f"the product name must be 1-{MAX_PRODUCT_NAME} characters")
    if not text.isprintable() or has_bidi_controls(text) or "<" in text or ">" in text:
        raise InvalidInput("the product name must be one line of printable text without <, > or bidirectional "
                           "controls")
    readable = readable_form(text) or text
    if "@" in readable or has_at_lookalike(text) or "://" in readable:
        raise InvalidInput("the product name must not hold an address or a URL: give them as --support-contact")
    return text


def check_support_contact(value: object) -> str:
    """Where users get help (``$support_contact``): one plain address, or an https page."""
    text = value.strip() if isinstance(value, str) else ""
    if "://" in text:
        if (problem := web_url_problem(text)) is not None:
            raise InvalidInput(f"the support contact {problem}")
        return text
    if address_problem(text) is not None:
        raise InvalidInput("the support contact must be a single plain email address like help@example.com, "
                           "or an https:// page")
    return text


def check_locale(value: object) -> str:
    """A default locale: a BCP 47 tag whose texts ship (``SHIPPED_LOCALES``), in its canonical lower case."""
    tag = value.strip().lower().replace("_", "-") if isinstance(value, str) else ""
    if tag not in SHIPPED_LOCALES:
        raise InvalidInput(f"the default locale must be one of the shipped locales "
                           f"{', '.join(SHIPPED_LOCALES)} (a BCP 47 tag); got {tag[:20]!r}")
    return tag
