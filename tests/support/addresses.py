"""The one corpus of addresses every entry point is tested with (domain, CLI, HTTP, providers).

``HOSTILE`` holds addresses that each smuggle a second recipient, a header,
or a look-alike past a looser check; every one must be refused everywhere,
with nothing written. ``ACCEPTED`` holds plain addresses, each of which must
reach exactly one recipient, equal to itself, through every provider.
``LEGACY`` holds addresses the rule before this one let into the log; they
must still load and fold, and fail for good at send time.
"""

from __future__ import annotations

import pytest

from domain.input_checks import check_text


def _case(name: str, address: str) -> object:
    return pytest.param(address, id=name)


HOSTILE_ADDRESSES: dict[str, str] = {
    # A header parser decodes this into "victim@evil.com, x@example.com".
    "encoded-word": "=?utf-8?q?victim=40evil.com=2C_x?=@example.com",
    "encoded-word-base64": "=?utf-8?b?dmljdGltQGV2aWwuY29t?=@example.com",
    "encoded-word-in-domain": "ada@=?utf-8?q?evil.com?=.example.com",
    "comma-list": "victim@example.com,attacker@evil.example",
    "comma-and-space": "victim@example.com, attacker@evil.example",
    "semicolon-list": "victim@example.com;attacker@evil.example",
    "crlf-bcc": "ada@example.com\r\nBcc: attacker@evil.example",
    "lf": "ada@example.com\nattacker@evil.example",
    "nul": "ada@example.com\x00attacker@evil.example",
    "tab": "ada@example.com\tx",
    "group": "g: a@b.co;",
    "empty-group": "undisclosed-recipients:;",
    "display-name": '"A" <a@b.co>',
    "bare-angle-brackets": "<ada@example.com>",
    "display-name-unquoted": "Ada <ada@example.com>",
    "quoted-local-part": '"ada"@example.com',
    "quoted-local-with-at": '"attacker@evil.example"@example.com',
    "comment": "ada(comment)@example.com",
    "address-literal": "ada@[127.0.0.1]",
    "consecutive-dots": "a..b@example.com",
    "dots-everywhere": "a..b.@example.com",
    "leading-dot": ".ada@example.com",
    "trailing-dot-local": "ada.@example.com",
    "trailing-dot-domain": "ada@example.com.",
    "domain-double-dot": "ada@example..com",
    "no-dot-in-domain": "ada@localhost",
    "hyphen-label": "ada@-evil.example",
    "underscore-domain": "ada@ev_il.example",
    "two-ats": "ada@evil.example@example.com",
    "no-at": "ada.example.com",
    "empty-local": "@evil.example",
    "empty-domain": "ada@",
    "idn-homograph-cyrillic-a": "ada@ex\u0430mple.com",
    "idn-unicode-domain": "ada@b\u00fccher.example",
    "non-ascii-local": "j\u00f6rg@example.com",
    "fullwidth-at": "ada\uff20example.com",
    "bidi-override": "ada\u202e@example.com",
    "bidi-isolate-domain": "ada@\u2067example.com",
    "zero-width-space": "ada\u200b@example.com",
    "local-part-65": "a" * 65 + "@example.com",
    "label-64": "ada@" + "a" * 64 + ".com",
    "whole-255": "a@" + ".".join(["b" * 63] * 3) + "." + "c" * 61,
    "empty": "",
}
HOSTILE = [_case(name, address) for name, address in HOSTILE_ADDRESSES.items()]

ACCEPTED_ADDRESSES: dict[str, str] = {
    "plain": "ada@example.com",
    "dotted-local": "ada.lovelace@example.co.uk",
    "plus-tag": "ada+reset@example.com",
    "atext-specials": "o'brien!#$%&*/^_`{|}~-x@example.com",
    "equals-without-question": "a=b@example.com",
    "question-without-equals": "a?b@example.com",
    "mixed-case": "Ada.Lovelace@Example.COM",
    "punycode-domain": "ada@xn--bcher-kva.example",
    "digits-and-hyphens": "123@mail-1.example-2.com",
    "local-part-64": "a" * 64 + "@example.com",
    "whole-254": "a@" + ".".join(["b" * 63] * 3) + "." + "c" * 60,
}
ACCEPTED = [_case(name, address) for name, address in ACCEPTED_ADDRESSES.items()]

# Let in by the old rule (an "@" with text on both sides, no whitespace):
# such addresses may sit in queued emails and in the log.
LEGACY_ADDRESSES: dict[str, str] = {
    "encoded-word": HOSTILE_ADDRESSES["encoded-word"],
    "comma-list": HOSTILE_ADDRESSES["comma-list"],
    "dots-everywhere": HOSTILE_ADDRESSES["dots-everywhere"],
}
LEGACY = [_case(name, address) for name, address in LEGACY_ADDRESSES.items()]


def old_rule(recipient: str) -> None:
    """The address check authledger applied before the one address rule (for writing legacy events)."""
    check_text("recipient", recipient, max_length=254)
    local, _, domain = recipient.rpartition("@")
    assert local and domain, "the old rule refused this address too"


def assert_mentions_no_address(text: str, address: str) -> None:
    """Error output names the rule broken, never the address."""
    if address:
        assert address not in text
