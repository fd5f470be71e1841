"""A data directory for a test that runs authledger on the embedded default, as a new user would."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def fresh_data_dir() -> Iterator[Path]:
    """An empty AUTHLEDGER_DATA_DIR, removed afterwards.

    Not under pytest's tmp_path: when root runs the suite, the embedded server
    runs as its own account, and a concurrent pytest session resets the mode of
    the shared basetemp to 0700, which would lock the server out of its files.
    """
    parent = Path(tempfile.mkdtemp(prefix="authledger-test-embedded-"))
    try:
        yield parent / "data"
    finally:
        shutil.rmtree(parent, ignore_errors=True)
