"""On the embedded default the audit commands sign with a development key, made once like the others."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from domain.errors import ConfigError
from infra.audit.digest import configured_public_key, signing_key
from infra.config.settings import Settings
from tests.support.cli import cli_env, run_cli

RAW = serialization.Encoding.Raw, serialization.PublicFormat.Raw


def test_the_embedded_default_makes_a_development_signing_key_once_mode_0600(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    assert configured_public_key(settings) is None, "verifying makes no key"

    with caplog.at_level(logging.WARNING, logger="authledger"):
        first, again = signing_key(settings), signing_key(settings)

    path = tmp_path / "data" / "dev-signing-key.pem"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert first.public_key().public_bytes(*RAW) == again.public_key().public_bytes(*RAW)
    assert configured_public_key(settings).public_bytes(*RAW) == first.public_key().public_bytes(*RAW)
    assert [record.getMessage() for record in caplog.records] == [
        "generated a development audit signing key; set AUTHLEDGER_SIGNING_KEY or AUTHLEDGER_SIGNING_KEY_FILE in "
        "production"]


def test_with_a_database_url_a_signing_key_is_still_required(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no signing key"):
        signing_key(Settings(database_url="postgresql://db.example/authledger", data_dir=tmp_path))
    assert not (tmp_path / "dev-signing-key.pem").exists()


def test_audit_public_key_works_on_the_defaults_and_config_show_says_where_the_key_is(tmp_path: Path) -> None:
    env = cli_env(None, AUTHLEDGER_DATA_DIR=str(tmp_path / "data"), AUTHLEDGER_SIGNING_KEY=None,
                  AUTHLEDGER_SIGNING_KEY_FILE=None)
    first = run_cli(env, "audit", "public-key")
    again = run_cli(env, "audit", "public-key")
    assert first.exit_code == again.exit_code == 0, first.output
    assert first.stdout == again.stdout and first.stdout.strip()

    shown = run_cli(env, "config", "show")
    [line] = [line for line in shown.output.splitlines() if line.startswith("AUTHLEDGER_SIGNING_KEY=")]
    assert "dev-signing-key.pem" in line and line.endswith("# generated development key file")
