"""Text fields refuse whitespace and control characters, by two scans rather than a loop over the characters."""

from __future__ import annotations

import sys

from domain.addresses import address_problem
from domain.characters import has_unsafe_characters


def test_every_code_point_is_judged_as_the_loop_over_characters_judged_it() -> None:
    # The scans lean on a fact of Unicode that Python's tables could change: every whitespace character but the
    # space is unprintable. Checked here at each code point, so an upgrade that breaks it fails here.
    for code_point in range(sys.maxunicode + 1):
        ch = chr(code_point)
        assert has_unsafe_characters(f"a{ch}b") == (ch.isspace() or not ch.isprintable()), hex(code_point)


def test_an_address_with_whitespace_or_a_control_character_is_refused_for_it() -> None:
    for ch in (" ", "\t", "\r", "\n", "\x00", "\x1f", "\x7f"):
        assert address_problem(f"ann{ch}@example.com") == "it must not contain whitespace or control characters"
    assert address_problem("ann@example.com") is None
