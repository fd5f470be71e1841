"""Languages of the emails: BCP 47 tags read, normalised and matched, pure.

A create may name the end user's language (``locale``, a BCP 47 tag such as
``de``, ``de-AT`` or ``zh-Hant-TW``). The tag is checked for the form RFC
5646 gives a language tag (not against the IANA registry: a well-formed tag
nobody translated simply falls back) and stored in its conventional case.
When the email is rendered, ``best_locale`` picks the language it is written
in from the ones there are templates for: the request's, then the tenant's
default, then English, each also by its shorter prefixes (RFC 4647 lookup:
``de-AT`` is served by ``de``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from domain.errors import InvalidInput

ENGLISH = "en"
MAX_LOCALE = 64  # RFC 5646 asks implementations to take 35 characters at least; none sensible is longer
# RFC 5646's langtag (the "grandfathered" irregular tags and a bare private-use tag are refused): language
# with up to three extlangs, script, region, variants, extensions, private use. Written in the syntax
# ECMA-262 and Python read alike, so the HTTP schema states this very pattern.
_ALPHANUM = "[A-Za-z0-9]"
LOCALE_PATTERN = (
    "^(?:[A-Za-z]{2,3}(?:-[A-Za-z]{3}){0,3}|[A-Za-z]{4,8})"
    "(?:-[A-Za-z]{4})?"
    "(?:-(?:[A-Za-z]{2}|[0-9]{3}))?"
    f"(?:-(?:{_ALPHANUM}{{5,8}}|[0-9]{_ALPHANUM}{{3}}))*"
    f"(?:-[0-9A-WYZa-wyz](?:-{_ALPHANUM}{{2,8}})+)*"
    f"(?:-[Xx](?:-{_ALPHANUM}{{1,8}})+)?$"
)
_LOCALE = re.compile(LOCALE_PATTERN[:-1] + r"\Z")
RULE = "a BCP 47 language tag such as en, de or de-AT"


def parse_locale(value: object, *, name: str = "locale") -> str:
    """``value`` as a language tag in its conventional case (``de-at`` → ``de-AT``); ``InvalidInput`` if it is none.

    The message never repeats the value: it came from outside.
    """
    if not isinstance(value, str) or len(value) > MAX_LOCALE or not _LOCALE.match(value):
        raise InvalidInput(f"{name} must be {RULE}")
    return _conventional_case(value)


def _conventional_case(tag: str) -> str:
    """RFC 5646 section 2.1.1: language lower case, script title case, region upper case, the rest lower."""
    subtags = tag.lower().split("-")
    cased = [subtags[0]]
    singleton_seen = False
    for subtag in subtags[1:]:
        singleton_seen = singleton_seen or len(subtag) == 1
        if not singleton_seen and len(subtag) == 4 and subtag.isalpha():
            subtag = subtag.title()
        elif not singleton_seen and len(subtag) == 2 and subtag.isalpha():
            subtag = subtag.upper()
        cased.append(subtag)
    return "-".join(cased)


def prefixes(tag: str) -> list[str]:
    """``tag`` and its ever shorter prefixes, as RFC 4647 lookup tries them: ``zh-Hant-TW``, ``zh-Hant``, ``zh``.

    A prefix never ends in a singleton (``de-x`` is no tag).
    """
    subtags = tag.split("-")
    found = []
    while subtags:
        if len(subtags[-1]) > 1:
            found.append("-".join(subtags))
        subtags.pop()
    return found


def fallback_chain(requested: str | None, tenant_default: str | None) -> list[str]:
    """The languages to try, best first: the request's and its prefixes, the tenant's default and its, English."""
    chain: list[str] = []
    for tag in (requested, tenant_default, ENGLISH):
        for candidate in prefixes(tag) if tag else ():
            if candidate not in chain:
                chain.append(candidate)
    return chain


def best_locale(requested: str | None, tenant_default: str | None, available: Iterable[str]) -> str:
    """The first of ``fallback_chain`` that is ``available``; English when none is.

    Tags are compared as normalised (``parse_locale``); the answer is spelt as
    ``available`` spells it.
    """
    spelt = {tag.lower(): tag for tag in available}
    for candidate in fallback_chain(requested, tenant_default):
        if candidate.lower() in spelt:
            return spelt[candidate.lower()]
    return ENGLISH


def optional_locale(value: object) -> str | None:
    """``parse_locale`` for a field that may be left out (None)."""
    return None if value is None else parse_locale(value)
