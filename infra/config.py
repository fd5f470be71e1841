"""Configuration from the environment (and CLI options), validated at start.

Every bad value is reported, one line each, before anything starts: a
service that runs with half its configuration is worse than one that
refuses to run.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from attrs import asdict, field, frozen

from domain.errors import ConfigError

PROVIDERS = ("maildir", "smtp", "http")
LOG_FORMATS = ("auto", "json", "text")


@frozen
class Settings:
    data_dir: Path = Path(".authledger")
    database_url: str | None = field(default=None, repr=False)
    provider: str = "maildir"
    maildir: Path | None = None
    smtp_url: str | None = field(default=None, repr=False)
    http_provider_url: str | None = None
    http_provider_key: str | None = field(default=None, repr=False)
    sender: str = "authledger <no-reply@authledger.localhost>"
    reset_url: str = "http://localhost:8000/reset"
    token_keys: str | None = field(default=None, repr=False)
    reset_ttl: int = 30 * 60
    reset_cooldown: int = 60
    reset_hourly_limit: int = 5
    otp_ttl: int = 10 * 60
    otp_cooldown: int = 60
    otp_hourly_limit: int = 5
    otp_digits: int = 6
    otp_max_attempts: int = 5
    otp_account_lock_failures: int = 100
    otp_account_lock_seconds: int = 15 * 60
    otp_account_lock_max_seconds: int = 24 * 3600
    lease_seconds: int = 45
    lease_margin_seconds: int = 5
    provider_timeout: int = 10
    max_attempts: int = 5
    poll_seconds: float = 5.0
    log_format: str = "auto"
    master_key: str | None = field(default=None, repr=False)
    signing_key: str | None = field(default=None, repr=False)
    signing_key_file: Path | None = None

    @property
    def maildir_path(self) -> Path:
        return self.maildir or self.data_dir / "maildir"


# setting name -> environment variable
ENVIRONMENT = {
    "data_dir": "AUTHLEDGER_DATA_DIR",
    "database_url": "DATABASE_URL",
    "provider": "AUTHLEDGER_PROVIDER",
    "maildir": "AUTHLEDGER_MAILDIR",
    "smtp_url": "AUTHLEDGER_SMTP_URL",
    "http_provider_url": "AUTHLEDGER_HTTP_PROVIDER_URL",
    "http_provider_key": "AUTHLEDGER_HTTP_PROVIDER_KEY",
    "sender": "AUTHLEDGER_SENDER",
    "reset_url": "AUTHLEDGER_RESET_URL",
    "token_keys": "AUTHLEDGER_TOKEN_KEYS",
    "reset_ttl": "AUTHLEDGER_RESET_TTL",
    "reset_cooldown": "AUTHLEDGER_RESET_COOLDOWN",
    "reset_hourly_limit": "AUTHLEDGER_RESET_HOURLY_LIMIT",
    "otp_ttl": "AUTHLEDGER_OTP_TTL",
    "otp_cooldown": "AUTHLEDGER_OTP_COOLDOWN",
    "otp_hourly_limit": "AUTHLEDGER_OTP_HOURLY_LIMIT",
    "otp_digits": "AUTHLEDGER_OTP_DIGITS",
    "otp_max_attempts": "AUTHLEDGER_OTP_MAX_ATTEMPTS",
    "otp_account_lock_failures": "AUTHLEDGER_OTP_ACCOUNT_LOCK_FAILURES",
    "otp_account_lock_seconds": "AUTHLEDGER_OTP_ACCOUNT_LOCK_SECONDS",
    "otp_account_lock_max_seconds": "AUTHLEDGER_OTP_ACCOUNT_LOCK_MAX_SECONDS",
    "lease_seconds": "AUTHLEDGER_LEASE_SECONDS",
    "lease_margin_seconds": "AUTHLEDGER_LEASE_MARGIN",
    "provider_timeout": "AUTHLEDGER_PROVIDER_TIMEOUT",
    "max_attempts": "AUTHLEDGER_MAX_ATTEMPTS",
    "poll_seconds": "AUTHLEDGER_POLL_SECONDS",
    "log_format": "AUTHLEDGER_LOG_FORMAT",
    "master_key": "AUTHLEDGER_MASTER_KEY",
    "signing_key": "AUTHLEDGER_SIGNING_KEY",
    "signing_key_file": "AUTHLEDGER_SIGNING_KEY_FILE",
}
SECRETS = {"database_url", "smtp_url", "http_provider_key", "token_keys", "master_key", "signing_key"}


def _whole(low: int, high: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError(f"must be a whole number, got {raw!r}") from None
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}, got {value}")
        return value

    return parse


def _seconds(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"must be a number of seconds, got {raw!r}") from None
    if not 0 < value <= 3600:
        raise ValueError(f"must be between 0 and 3600 seconds, got {raw}")
    return value


def _choice(options: tuple[str, ...]) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw not in options:
            raise ValueError(f"must be one of {', '.join(options)}, got {raw!r}")
        return raw

    return parse


def _http_url(raw: str) -> str:
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"must be an http:// or https:// URL, got {raw!r}")
    return raw


def parse_token_keys(raw: str) -> dict[str, bytes]:
    """``id:base64key,...`` newest first -> ordered {id: key}; keys of at least 32 bytes."""
    return _key_list(raw, lambda key: None if len(key) >= 32 else f"{len(key)} bytes; token keys need at least 32")


def parse_master_keys(raw: str) -> dict[str, bytes]:
    """``id:base64key,...`` newest first -> ordered {id: key}; AES-256 keys of exactly 32 bytes."""
    return _key_list(raw, lambda key: None if len(key) == 32 else f"{len(key)} bytes; a master key is exactly 32")


def _key_list(raw: str, wrong_size: Callable[[bytes], str | None]) -> dict[str, bytes]:
    keys: dict[str, bytes] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        key_id, sep, encoded = item.partition(":")
        if not sep or not key_id.isidentifier():
            raise ValueError("must be id:base64key pairs separated by commas (ids are letters, digits, _)")
        try:
            key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), altchars=b"-_", validate=False)
        except (binascii.Error, ValueError):
            raise ValueError(f"key {key_id!r} is not valid base64") from None
        if problem := wrong_size(key):
            raise ValueError(f"key {key_id!r} is {problem}")
        if key_id in keys:
            raise ValueError(f"key id {key_id!r} appears twice")
        keys[key_id] = key
    if not keys:
        raise ValueError("names no key")
    return keys


def _token_keys(raw: str) -> str:
    parse_token_keys(raw)
    return raw


def _master_keys(raw: str) -> str:
    parse_master_keys(raw)
    return raw


def parse_signing_key(raw: str) -> bytes:
    """The raw 32-byte Ed25519 private key (seed) from base64; the message never repeats the value."""
    try:
        key = base64.b64decode(raw.strip() + "=" * (-len(raw.strip()) % 4), altchars=b"-_", validate=False)
    except (binascii.Error, ValueError):
        raise ValueError("is not valid base64") from None
    if len(key) != 32:
        raise ValueError(f"must be the base64 of a raw 32-byte Ed25519 private key, got {len(key)} bytes")
    return key


def _signing_key(raw: str) -> str:
    parse_signing_key(raw)
    return raw


PARSERS: dict[str, Callable[[str], Any]] = {
    "data_dir": Path,
    "maildir": Path,
    "provider": _choice(PROVIDERS),
    "http_provider_url": _http_url,
    "reset_url": _http_url,
    "token_keys": _token_keys,
    "master_key": _master_keys,
    "signing_key": _signing_key,
    "signing_key_file": Path,
    "reset_ttl": _whole(1, 24 * 3600),  # DESIGN: a reset link never lives past 24 h
    "reset_cooldown": _whole(0, 3600),
    "reset_hourly_limit": _whole(1, 1000),
    "otp_ttl": _whole(1, 3600),
    "otp_cooldown": _whole(0, 3600),
    "otp_hourly_limit": _whole(1, 1000),
    "otp_digits": _whole(4, 10),
    "otp_max_attempts": _whole(1, 100),
    "otp_account_lock_failures": _whole(1, 100_000),
    # Up to 30 days: a lock longer than that is a typo (or an extra zero).
    "otp_account_lock_seconds": _whole(1, 30 * 24 * 3600),
    "otp_account_lock_max_seconds": _whole(1, 30 * 24 * 3600),
    "lease_seconds": _whole(1, 3600),
    "lease_margin_seconds": _whole(0, 600),
    "provider_timeout": _whole(1, 600),
    "max_attempts": _whole(1, 100),
    "poll_seconds": _seconds,
    "log_format": _choice(LOG_FORMATS),
}


def load_settings(environ: Mapping[str, str], overrides: Mapping[str, Any] | None = None) -> Settings:
    """Settings from environment variables, then CLI options; every bad value reported at once."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    given = {name: environ[var] for name, var in ENVIRONMENT.items() if environ.get(var, "") != ""}
    given.update({name: value for name, value in (overrides or {}).items() if value is not None})
    for name, raw in given.items():
        parse = PARSERS.get(name, str)
        try:
            values[name] = parse(raw) if isinstance(raw, str) else raw
        except ValueError as error:
            problems.append(f"{ENVIRONMENT[name]} {error}")
    settings = Settings(**values) if not problems else None
    if settings is not None:
        problems += _cross_checks(settings)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    assert settings is not None
    return settings


def _cross_checks(settings: Settings) -> list[str]:
    problems = []
    if settings.provider == "smtp" and not settings.smtp_url:
        problems.append("AUTHLEDGER_SMTP_URL is required when AUTHLEDGER_PROVIDER=smtp")
    if settings.provider == "http" and not settings.http_provider_url:
        problems.append("AUTHLEDGER_HTTP_PROVIDER_URL is required when AUTHLEDGER_PROVIDER=http")
    if settings.otp_account_lock_max_seconds < settings.otp_account_lock_seconds:
        problems.append(
            f"AUTHLEDGER_OTP_ACCOUNT_LOCK_MAX_SECONDS ({settings.otp_account_lock_max_seconds}) must not be shorter "
            f"than AUTHLEDGER_OTP_ACCOUNT_LOCK_SECONDS ({settings.otp_account_lock_seconds})"
        )
    if settings.signing_key and settings.signing_key_file:
        problems.append("set AUTHLEDGER_SIGNING_KEY or AUTHLEDGER_SIGNING_KEY_FILE, not both")
    # A lease shorter than one provider call plus the margin would let a second
    # worker claim a message while the first is still sending it.
    if settings.lease_seconds <= settings.provider_timeout + settings.lease_margin_seconds:
        problems.append(
            f"AUTHLEDGER_LEASE_SECONDS ({settings.lease_seconds}) must exceed AUTHLEDGER_PROVIDER_TIMEOUT "
            f"({settings.provider_timeout}) plus AUTHLEDGER_LEASE_MARGIN ({settings.lease_margin_seconds})"
        )
    return problems


def masked(settings: Settings) -> dict[str, Any]:
    """The effective configuration for display, secrets replaced by ``***``."""
    shown = {}
    for name, value in asdict(settings).items():
        if name in SECRETS and value:
            value = "***"
        shown[ENVIRONMENT[name]] = str(value) if isinstance(value, Path) else value
    shown["AUTHLEDGER_MAILDIR"] = str(settings.maildir_path)
    return shown
