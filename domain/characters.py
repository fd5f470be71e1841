"""The character rule every single-token field shares: text fields and email addresses alike."""

from __future__ import annotations


def has_unsafe_characters(value: str) -> bool:
    """Whether ``value`` holds whitespace or a control character.

    Control characters (CR/LF above all) would let input inject email
    headers or forge log lines; whitespace is never valid in these fields.
    Every whitespace character but the space is unprintable, so two scans
    in C do what a Python loop over the characters did, on every request
    (tests/unit/test_characters.py checks each code point).
    """
    return " " in value or not value.isprintable()
