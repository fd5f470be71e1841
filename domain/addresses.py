"""The one rule an email address must pass, wherever it comes in.

An address is a single plain ASCII addr-spec: ``local@domain``, nothing
around it. The rule is deliberately narrower than RFC 5322, because every
form it refuses has been used to smuggle a second recipient past a check
that looked at the string while a header parser, a relay or a provider's API
looked at its meaning:

- encoded-words (``=?utf-8?q?victim=40evil.com=2C_x?=@example.com``), which
  a header parser decodes into ``victim@evil.com, x@example.com``;
- lists, groups and display names (commas, semicolons, colons, angle
  brackets, quotes), which many APIs split into several recipients;
- quoted local parts and comments, whose meaning differs between parsers;
- whitespace and control characters (CR/LF injects headers);
- non-ASCII, where IDN homographs and bidi overrides make an address read
  as another. SMTPUTF8 is not supported; a domain may still be given in its
  ASCII (``xn--``) form, which is what DNS and every relay use anyway.

The local part is an RFC 5322 dot-atom (no leading, trailing or doubled
dot), the domain is two or more LDH labels (RFC 1035/5890 host names, no
address literals), and the lengths are RFC 5321's: a local part of at most
64 octets, a label of at most 63, the whole at most 254. Messages name the
rule broken, never the address.
"""

from __future__ import annotations

import re

from domain.characters import has_unsafe_characters
from domain.errors import AddressInvalid

MAX_ADDRESS = 254  # RFC 5321 4.5.3.1.3: a path is 256 octets, two of them the angle brackets
MAX_LOCAL_PART = 64  # RFC 5321 4.5.3.1.1
MAX_LABEL = 63  # RFC 1035 2.3.4
RULE = "a single plain email address like name@example.com"

# RFC 5322 atext: the characters of a dot-atom other than the dot.
_ATEXT = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+\Z")
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\Z")
# Characters that only appear in address lists, groups, display names,
# quoted strings, comments and address literals: named in the message.
_LIST_SYNTAX = frozenset(',;:<>"()[]\\')


def address_problem(value: object) -> str | None:
    """Why ``value`` is not an address this system sends to, or None when it is."""
    if not isinstance(value, str) or not value:
        return "it must be a non-empty string"
    if not value.isascii():
        return "it must be ASCII (internationalised addresses, SMTPUTF8, are not supported)"
    if len(value) > MAX_ADDRESS:
        return f"it must be at most {MAX_ADDRESS} characters"
    if "=?" in value:
        return "it must not contain an encoded-word (=?)"
    if any(ch in _LIST_SYNTAX for ch in value):
        return "it must be one address, without a display name, group, list, quotes, comments or brackets"
    if has_unsafe_characters(value):
        return "it must not contain whitespace or control characters"
    if value.count("@") != 1:
        return "it must contain exactly one @"
    local, domain = value.split("@")
    return _local_problem(local) or _domain_problem(domain)


def _local_problem(local: str) -> str | None:
    if not local:
        return "the part before @ must not be empty"
    if len(local) > MAX_LOCAL_PART:
        return f"the part before @ must be at most {MAX_LOCAL_PART} characters"
    if not all(_ATEXT.match(atom) for atom in local.split(".")):
        return "the part before @ must not start or end with a dot or hold two dots in a row"
    return None


def _domain_problem(domain: str) -> str | None:
    if not domain:
        return "the part after @ must not be empty"
    labels = domain.split(".")
    if len(labels) < 2:
        return "the domain must contain a dot, like example.com"
    if any(label == "" for label in labels):
        return "the domain must not start or end with a dot or hold two dots in a row"
    if any(len(label) > MAX_LABEL for label in labels):
        return f"each part of the domain must be at most {MAX_LABEL} characters"
    if not all(_LABEL.match(label) for label in labels):
        return "the domain must be letters, digits and inner hyphens, separated by dots"
    return None


def check_address(value: object, name: str = "recipient") -> str:
    """``value`` unchanged when it is a single plain address; else ``AddressInvalid`` naming the rule broken."""
    problem = address_problem(value)
    if problem is not None or not isinstance(value, str):
        raise AddressInvalid(f"{name} must be {RULE}: {problem}")
    return value
