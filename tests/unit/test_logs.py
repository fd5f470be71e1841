"""Log lines: one per event, key=value or JSON, and no value can forge or split a line."""

from __future__ import annotations

import json
import logging

import pytest

from infra.logs import error_line, log_event
from tests.support.log_lines import logged_lines

log = logging.getLogger("authledger.test")


def fields_of(line: str) -> list[str]:
    """The key=value tokens of a text line, split where the format puts spaces."""
    tokens, current, quoted, escaped = [], "", False, False
    for char in line:
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == " " and not quoted:
            tokens.append(current)
            current = ""
            continue
        current += char
    return [*tokens, current]


def test_a_plain_value_prints_bare_and_one_with_a_space_prints_quoted() -> None:
    with logged_lines("text") as lines:
        log_event(log, "http request", path="/v1/otp/challenges", client="shop one", note="")

    [line] = lines()
    assert line.endswith(' logger=authledger.test event="http request" path=/v1/otp/challenges '
                         'client="shop one" note=""')


@pytest.mark.parametrize(
    ("value", "printed"),
    [
        ("/a\nlevel=error event=forged", r'"/a\nlevel=error event=forged"'),
        ("/a\r\nx", r'"/a\r\nx"'),
        ("/a\tb", r'"/a\tb"'),
        ("/a\x1b[31mred", r'"/a\x1b[31mred"'),
        ("/a\x00\x7f\x85b", r'"/a\x00\x7f\x85b"'),
        ("/a\u2028b\u202eevil", r'"/a\u2028b\u202eevil"'),
        ('/a"b', r'"/a\"b"'),
        ("/a\\nb", r'"/a\\nb"'),
        ("/café", "/café"),
    ],
)  # fmt: skip
def test_control_characters_in_a_value_print_escaped_on_the_one_line(value: str, printed: str) -> None:
    with logged_lines("text") as lines:
        log_event(log, "http request", path=value, status=404)

    [line] = lines()
    assert f" path={printed} status=404" in line
    assert line.isprintable()
    assert [token.split("=", 1)[0] for token in fields_of(line)] == ["ts", "level", "logger", "event", "path",
                                                                       "status"]


def test_the_event_itself_is_escaped_as_well() -> None:
    with logged_lines("text") as lines:
        log.info("forged\nlevel=error")

    [line] = lines()
    assert r'event="forged\nlevel=error"' in line


def test_the_json_format_stays_one_valid_json_object_per_line() -> None:
    with logged_lines("json") as lines:
        log_event(log, "http request", path="/a\n\t\x1b\u202e\"}{", status=404)

    [line] = lines()
    assert json.loads(line)["path"] == "/a\n\t\x1b\u202e\"}{"


def test_an_error_is_logged_as_its_type_and_first_line_even_when_it_has_no_message() -> None:
    assert error_line(RuntimeError()) == "RuntimeError: "
    assert error_line(ValueError("first\nsecond")) == "ValueError: first"
