"""One log line per event of interest: key=value on a terminal, JSON otherwise.

Callers pass fields, never prose with values baked in, so that every line can
be searched by message_id or request_id. A token or code is never a field.
In the key=value form a value with a control character (a newline, a tab,
ESC, ...) prints it escaped, so that no value can forge or split a line.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

FIELDS = "authledger_fields"


class _Formatter(logging.Formatter):
    def __init__(self, as_json: bool) -> None:
        super().__init__()
        self.as_json = as_json

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
            **getattr(record, FIELDS, {}),
        }
        if self.as_json:
            return json.dumps(fields, default=str)
        return " ".join(f"{key}={_quoted(value)}" for key, value in fields.items())


# Characters that stand for themselves inside a quoted value are the printable
# ones; a newline, a carriage return, ESC or a bidi override in a value (a
# request path, say) could otherwise forge a line or hide part of one.
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", '"': '\\"', "\\": "\\\\"}


def _escaped(char: str) -> str:
    if char in _ESCAPES:
        return _ESCAPES[char]
    if char.isprintable():
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _quoted(value: Any) -> str:
    """A value as one token of a key=value line: bare when plain, else quoted with
    every quote, backslash and non-printable character escaped."""
    text = str(value)
    escaped = "".join(map(_escaped, text))
    return f'"{escaped}"' if (escaped != text or " " in text or not text) else text


def configure_logging(log_format: str = "auto", level: int = logging.INFO) -> None:
    as_json = log_format == "json" or (log_format == "auto" and not sys.stderr.isatty())
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter(as_json))
    root = logging.getLogger("authledger")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def error_line(error: BaseException) -> str:
    """An error for one log line: its type and the first line of its message.

    Never empty, so the loops that log and retry cannot fail in their own
    handler on an error with no message (``str(error).splitlines()[0]`` did).
    """
    return f"{type(error).__name__}: {error}".splitlines()[0]


def log_event(logger: logging.Logger, event: str, level: int = logging.INFO, /, **fields: Any) -> None:
    """Log ``event`` with structured ``fields`` (None values are left out).

    The first three are positional-only, so that a ``**fields`` mapping can never fill ``level``.
    """
    logger.log(level, event, extra={FIELDS: {k: v for k, v in fields.items() if v is not None}})
