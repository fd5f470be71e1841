"""The lines authledger's own logging setup writes, captured for a test."""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from infra.logs import configure_logging


@contextmanager
def logged_lines(log_format: str) -> Iterator[Callable[[], list[str]]]:
    """Configure logging as a command would (``log_format`` json or text), to a buffer;
    yields a function returning the lines written so far. The previous setup is put back."""
    root = logging.getLogger("authledger")
    saved = root.handlers[:], root.level, root.propagate
    buffer, stderr = io.StringIO(), sys.stderr
    sys.stderr = buffer  # configure_logging writes to the stderr of the moment it runs
    try:
        configure_logging(log_format)
    finally:
        sys.stderr = stderr
    try:
        yield lambda: buffer.getvalue().splitlines()
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        root.propagate = saved[2]
