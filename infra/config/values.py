"""How a setting's text becomes a value: numbers, durations, choices, URLs, keys.

Each parser raises ``ValueError`` with a message that names what was wrong
and never repeats a secret; ``infra.config.settings`` collects those
messages, one line per bad setting. The URL parsers enforce the standards floors (https and
TLS except to this machine), and ``mask_url`` is how every URL is shown.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
from collections.abc import Callable
from urllib.parse import urlsplit

from domain.errors import InvalidInput
from domain.tenants import parse_purpose_list


def whole(low: int, high: int, *, low_because: str = "", high_because: str = "") -> Callable[[str], int]:
    # A bound set by a standard names it, so that the refusal says why.
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError(f"must be a whole number, got {raw!r}") from None
        if not low <= value <= high:
            because = low_because if value < low else high_because
            raise ValueError(f"must be between {low} and {high}{f' ({because})' if because else ''}, got {value}")
        return value

    return parse


def seconds(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"must be a number of seconds, got {raw!r}") from None
    if not 0 < value <= 3600:
        raise ValueError(f"must be between 0 and 3600 seconds, got {raw}")
    return value


def choice(options: tuple[str, ...]) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw not in options:
            raise ValueError(f"must be one of {', '.join(options)}, got {raw!r}")
        return raw

    return parse


def yes_no(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"must be true or false, got {raw!r}")


def mask_url(url: str) -> str:
    """``url`` with its userinfo, query and fragment replaced by ``***``: how a URL is shown or quoted.

    ``https://user:pass@host/path?key=abc`` reads ``https://***@host/path?***``. Text
    that is not a ``scheme://`` URL is masked whole: it might be a secret mistyped.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme:
        return "***"
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    if "@" in authority:
        authority = "***@" + authority.rpartition("@")[2]
    tail, has_fragment, _ = tail.partition("#")
    path, has_query, _ = tail.partition("?")
    return f"{scheme}://{authority}{path}{'?***' if has_query else ''}{'#***' if has_fragment else ''}"


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` names this machine: localhost, a ``.localhost`` name (RFC 6761) or a
    loopback address. Nothing is resolved: the check reads the configuration, not the network."""
    if not host:
        return False
    host = host.lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url_parts(raw: str, schemes: tuple[str, ...]) -> tuple[str, str | None]:
    """(scheme, host) of ``raw``; ``ValueError`` unless it is a URL of one of ``schemes`` with a host."""
    try:
        parts = urlsplit(raw.strip())
        scheme, host = parts.scheme.lower(), parts.hostname
        parts.port  # noqa: B018 - read for its check: an invalid port raises ValueError
    except ValueError:
        scheme, host = "", None
    if scheme not in schemes or not host:
        names = [f"{name}://" for name in schemes]
        listed = ", ".join(names[:-1]) + " or " + names[-1]
        raise ValueError(f"must be a URL with a host, starting with {listed}; got {mask_url(raw)!r}")
    return scheme, host


def https_url(raw: str) -> str:
    # Floor: a reset link or a provider call carries a credential (the token,
    # the provider key, the recipient); in clear text only to this machine.
    scheme, host = _url_parts(raw, ("http", "https"))
    if scheme != "https" and not is_loopback(host):
        raise ValueError(f"must use https:// (http:// only for localhost or a loopback address), "
                         f"got {mask_url(raw)!r}")
    return raw.strip()


def smtp_url(raw: str) -> str:
    # Floor: mail holds live links and codes, and the URL a password; plain
    # smtp:// only to this machine (a local relay), else TLS or STARTTLS.
    scheme, host = _url_parts(raw, ("smtp", "smtp+starttls", "smtps"))
    if scheme == "smtp" and not is_loopback(host):
        raise ValueError(f"must use TLS (smtps:// or smtp+starttls://; plain smtp:// only for localhost "
                         f"or a loopback address), got {mask_url(raw)!r}")
    return raw.strip()


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


def parse_signing_key(raw: str) -> bytes:
    """The raw 32-byte Ed25519 private key (seed) from base64; the message never repeats the value."""
    try:
        key = base64.b64decode(raw.strip() + "=" * (-len(raw.strip()) % 4), altchars=b"-_", validate=False)
    except (binascii.Error, ValueError):
        raise ValueError("is not valid base64") from None
    if len(key) != 32:
        raise ValueError(f"must be the base64 of a raw 32-byte Ed25519 private key, got {len(key)} bytes")
    return key


def checked_text(parse: Callable[[str], object]) -> Callable[[str], str]:
    # Keys are checked at start but kept as text: each is parsed where it is used.
    def check(raw: str) -> str:
        parse(raw)
        return raw

    return check


def otp_purposes(raw: str) -> str:
    """``NAME=TEXT,...``, checked by the rule a tenant's own purposes pass, and kept as text."""
    try:
        parse_purpose_list(raw)
    except InvalidInput as error:
        raise ValueError(error.message) from None
    return raw.strip()
