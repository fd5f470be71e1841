"""Character rules: what single-token fields hold, and how free text is read before it is judged.

An address hidden in text is still an address. ``readable_form`` undoes the
disguises a reader's tools undo for them (Unicode compatibility forms such
as the fullwidth ``＠``, percent-encoding such as ``%40`` or ``%2540``, HTML
character references such as ``&#64;``), so that the rules in
``domain.input_checks`` judge what a person, a browser or a search would
see, not the bytes that were sent.
"""

from __future__ import annotations

import html
import unicodedata
from urllib.parse import unquote


def has_unsafe_characters(value: str) -> bool:
    """Whether ``value`` holds whitespace or a control character.

    Control characters (CR/LF above all) would let input inject email
    headers or forge log lines; whitespace is never valid in these fields.
    Every whitespace character but the space is unprintable, so two scans
    in C do what a Python loop over the characters did, on every request
    (tests/unit/test_characters.py checks each code point).
    """
    return " " in value or not value.isprintable()


# Unicode's explicit directional formatting characters (UAX #9): embeddings
# and overrides (U+202A-202E), isolates (U+2066-2069) and the implicit marks
# (U+200E, U+200F, U+061C). They make text display in another order than it
# is stored ("Trojan Source", CVE-2021-42574): a reviewer would read one
# reason while the log holds another.
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")


def has_bidi_controls(value: str) -> bool:
    """Whether ``value`` holds a bidirectional control character."""
    return not value.isascii() and any(ch in BIDI_CONTROLS for ch in value)


def has_at_lookalike(value: str) -> bool:
    """Whether ``value`` holds a character other than ``@`` that NFKC folds into one (``＠``, ``﹫``)."""
    return not value.isascii() and any(
        ch != "@" and "@" in unicodedata.normalize("NFKC", ch) for ch in value if not ch.isascii())


# Enough to read an @ percent-encoded three times over (%252540) and see
# that nothing changes after; text still changing then is refused, not read on.
DECODING_ROUNDS = 4


def readable_form(value: str) -> str | None:
    """``value`` as it would be read: NFKC-normalised, percent-decoded and HTML-unescaped, repeatedly until
    nothing changes; None when it still changes after ``DECODING_ROUNDS`` rounds (encoded to hide)."""
    if value.isascii() and "%" not in value and "&" not in value:
        return value  # the usual id or reason: nothing to undo, and no work for it
    for _ in range(DECODING_ROUNDS):
        decoded = html.unescape(unquote(unicodedata.normalize("NFKC", value), errors="replace"))
        if decoded == value:
            return value
        value = decoded
    return None
