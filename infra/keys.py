"""Token and master keys come from configuration, never from the database.

On the embedded default with no AUTHLEDGER_TOKEN_KEYS (or no
AUTHLEDGER_MASTER_KEY), a development key is generated once into the data
directory (mode 0600) with a warning, so that a fresh clone works;
production configures its own keys. The warning comes again on every start
of the long-running commands, not on every command.
"""

from __future__ import annotations

import base64
import logging
import os
import secrets
from pathlib import Path

from domain.errors import ConfigError
from domain.tokens import TokenKeys
from infra.config.settings import DEV_KEY_FILES, Settings
from infra.config.values import parse_token_keys
from infra.logs import log_event
from infra.eventlog.subject_keys import MasterKeys

log = logging.getLogger("authledger.keys")
DEV_KEY_FILE = DEV_KEY_FILES["token_keys"]
DEV_MASTER_KEY_FILE = DEV_KEY_FILES["master_key"]


def _dev_keys(data_dir: Path, file_name: str = DEV_KEY_FILE) -> str:
    path = data_dir / file_name
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        encoded = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process generated it first; use theirs
        else:
            with os.fdopen(descriptor, "w") as file:
                file.write(f"dev:{encoded}\n")
            _warn_once(data_dir)  # made now: worth a line from whichever command it is
    return path.read_text().strip()


def warn_if_development_keys(settings: Settings) -> None:
    """The development-keys warning, where it matters: ``serve`` and ``worker`` say it on every start.

    Other commands say it only when they generate a key, not on every run
    (a command that reads or writes one record need not repeat it).
    """
    if settings.database_url is None and not (settings.token_keys and settings.master_key):
        _warn_once(settings.data_dir)


_warned: set[Path] = set()


def _warn_once(data_dir: Path) -> None:
    # One line per process and data directory: a command that makes both
    # keys, or a serve that makes them and then starts, says it once.
    if data_dir in _warned:
        return
    _warned.add(data_dir)
    log_event(log, "using generated development keys; set AUTHLEDGER_TOKEN_KEYS and AUTHLEDGER_MASTER_KEY "
              "in production", logging.WARNING, data_dir=str(data_dir))


def load_token_keys(settings: Settings) -> TokenKeys:
    if settings.token_keys:
        spec = settings.token_keys
    elif settings.database_url is None:
        spec = _dev_keys(settings.data_dir)
    else:
        raise ConfigError("AUTHLEDGER_TOKEN_KEYS is required when DATABASE_URL is set")
    keys = parse_token_keys(spec)
    return TokenKeys(current_id=next(iter(keys)), keys=keys)


def load_master_keys(settings: Settings) -> MasterKeys:
    """The master keys that wrap users' data keys (``infra.eventlog.subject_keys``)."""
    if settings.master_key:
        return MasterKeys.parse(settings.master_key)
    if settings.database_url is None:
        return MasterKeys.parse(_dev_keys(settings.data_dir, DEV_MASTER_KEY_FILE))
    raise ConfigError("AUTHLEDGER_MASTER_KEY is required when DATABASE_URL is set: it wraps the keys that "
                      "encrypt personal data (docs/operations.md, \"Personal data and erasure\")")
