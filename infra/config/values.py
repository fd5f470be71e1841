"""How a setting's text becomes a value: numbers, durations, choices, URLs, keys.

Each parser raises ``ValueError`` with a message that names what was wrong
and never repeats a secret; ``infra.config.settings`` collects those
messages, one line per bad setting. The URL parsers enforce the standards floors (https and
TLS except to this machine); ``mask_url`` is how every URL is shown, and ``mask_passwords`` how a
database URL is shown where its user, hosts and parameters are wanted (``db url``).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from attrs import frozen

from domain.branding import (
    check_product_name,
    check_support_contact,
    is_loopback,
    split_sender,
    url_scheme_and_host,
    web_url_problem,
)
from domain.errors import InvalidInput
from domain.policy import Bounds
from domain.tenants import parse_purpose_list


def whole(low: int, high: int, *, low_because: str = "", high_because: str = "") -> Callable[[str], int]:
    # A bound set by a standard names it, so that the refusal says why.
    return bounded(Bounds(low, high, low_because, high_because))


def bounded(bounds: Bounds) -> Callable[[str], int]:
    """A whole number within ``bounds``: the one check a tenant's override of the same rule passes too."""
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError(f"must be a whole number, got {raw!r}") from None
        if (problem := bounds.problem(value)) is not None:
            raise ValueError(problem)
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


# libpq's connection parameters that hold no secret: ``mask_passwords`` shows these in a query and masks the
# value of every other one (``password``, ``sslpassword``, ``oauth_client_secret`` and whatever comes next).
LIBPQ_PLAIN_PARAMETERS = frozenset({
    "host", "hostaddr", "port", "dbname", "user", "passfile", "channel_binding", "connect_timeout",
    "client_encoding", "options", "application_name", "fallback_application_name", "keepalives",
    "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout", "replication",
    "gssencmode", "sslmode", "sslnegotiation", "sslcompression", "sslcert", "sslkey", "sslcertmode",
    "sslrootcert", "sslcrl", "sslcrldir", "sslsni", "requirepeer", "ssl_min_protocol_version",
    "ssl_max_protocol_version", "min_protocol_version", "max_protocol_version", "krbsrvname", "gsslib",
    "gssdelegation", "service", "target_session_attrs", "load_balance_hosts", "require_auth",
})


@frozen
class UrlParts:
    """A URL cut where every reader of it would cut: the parts ``mask_url`` and ``mask_passwords`` show or hide."""

    scheme: str
    userinfo: str | None  # everything before the host's "@", password included
    hosts: str  # one host[:port], or libpq's comma-separated list of them
    path: str
    query: str | None
    fragment: str | None


def _userinfo_end(rest: str) -> int:
    """Where the userinfo of ``rest`` (a URL after ``://``) ends: the index of its "@", or -1.

    Parsers disagree on a password holding an unencoded "/", "?", "#" or "@":
    RFC 3986 (urllib) ends the authority at the first "/?#", libpq looks for
    the first "@" before a "/", SQLAlchemy takes "user:" then anything up to
    an "@". The latest of their answers hides every reading of the password.
    """
    authority_end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    slash = rest.find("/")
    sqlalchemy = re.match(r"[^:/]*(?::[^@]*)?@", rest)
    candidates = [
        rest.rfind("@", 0, authority_end),
        rest.find("@", 0, slash if slash >= 0 else len(rest)),
        sqlalchemy.end() - 1 if sqlalchemy else -1,
    ]
    return max(candidates)


def split_url(url: str) -> UrlParts | None:
    """``url`` in its parts, or None when it is not a ``scheme://`` URL (a libpq ``key=value`` string, say)."""
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme or not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme):
        return None
    at = _userinfo_end(rest)
    userinfo, rest = (rest[:at], rest[at + 1:]) if at >= 0 else (None, rest)
    rest, has_fragment, fragment = rest.partition("#")
    rest, has_query, query = rest.partition("?")
    hosts, slash, path = rest.partition("/")
    return UrlParts(scheme, userinfo, hosts, slash + path, query if has_query else None,
                    fragment if has_fragment else None)


def mask_url(url: str) -> str:
    """``url`` with its userinfo, query and fragment replaced by ``***``: how a URL is shown or quoted.

    ``https://user:pass@host/path?key=abc`` reads ``https://***@host/path?***``. Text
    that is not a ``scheme://`` URL is masked whole: it might be a secret mistyped.
    """
    parts = split_url(url)
    if parts is None:
        return "***"
    return (f"{parts.scheme}://{'***@' if parts.userinfo is not None else ''}{parts.hosts}{parts.path}"
            f"{'?***' if parts.query is not None else ''}{'#***' if parts.fragment is not None else ''}")


def mask_passwords(url: str) -> str:
    """A database URL with only its secrets masked: the password in the userinfo, and the value of every query
    parameter that libpq does not list as plain (``password=``, ``sslpassword=``...); user, hosts (one or many),
    database and the plain parameters stay as psql takes them. What is not a URL is masked whole.

    ``postgresql://ada:pw@h1:5432,h2/auth?sslmode=require&password=pw`` reads
    ``postgresql://ada:***@h1:5432,h2/auth?sslmode=require&password=***``.
    """
    parts = split_url(url)
    if parts is None:
        return "***"
    userinfo = ""
    if parts.userinfo is not None:
        user, has_password, password = parts.userinfo.partition(":")
        userinfo = f"{user}{':***' if password else ':' if has_password else ''}@"  # an empty one hides nothing
    query = "" if parts.query is None else "?" + "&".join(_masked_parameter(item) for item in parts.query.split("&"))
    return f"{parts.scheme}://{userinfo}{parts.hosts}{parts.path}{query}{'#***' if parts.fragment is not None else ''}"


def _masked_parameter(item: str) -> str:
    name, has_value, value = item.partition("=")
    if unquote(name) in LIBPQ_PLAIN_PARAMETERS or (has_value and not value):
        return item
    return f"{name}=***" if has_value else "***"


def _url_parts(raw: str, schemes: tuple[str, ...]) -> tuple[str, str]:
    """(scheme, host) of ``raw``; ``ValueError`` unless it is a URL of one of ``schemes`` with a host."""
    found = url_scheme_and_host(raw, schemes)
    if found is None:
        names = [f"{name}://" for name in schemes]
        listed = ", ".join(names[:-1]) + " or " + names[-1]
        raise ValueError(f"must be a URL with a host, starting with {listed}; got {mask_url(raw)!r}")
    return found


def https_url(raw: str) -> str:
    # Floor: a reset link or a provider call carries a credential (the token, the provider key, the
    # recipient); in clear text only to this machine. The rule is the domain's, which a tenant's reset URL
    # passes too (domain.branding).
    _url_parts(raw, ("http", "https"))
    if (problem := web_url_problem(raw)) is not None:
        raise ValueError(f"{problem}, got {mask_url(raw)!r}")
    return raw.strip()


def sender(raw: str) -> str:
    """``name@example.com`` or ``Display Name <name@example.com>``: the rule a tenant's sender passes too."""
    try:
        split_sender(raw)
    except InvalidInput as error:
        raise ValueError(error.message) from None
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


HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,39}")


def host_name(raw: str) -> str:
    """A name for this host in ``/readyz`` and ``/metrics``: 1-40 of letters, digits, '.', '_', ':' and '-'."""
    if not HOST_NAME.fullmatch(raw):
        raise ValueError("must be 1-40 of A-Z, a-z, 0-9, '.', '_', ':' and '-', starting with a letter or digit")
    return raw
def product_name(raw: str) -> str:
    """The product name emails name: the rule a tenant's passes too (``domain.branding``)."""
    try:
        return check_product_name(raw)
    except InvalidInput as error:
        raise ValueError(error.message) from None


def support_contact(raw: str) -> str:
    """An address or an https page: the rule a tenant's support contact passes too (``domain.branding``)."""
    try:
        return check_support_contact(raw)
    except InvalidInput as error:
        raise ValueError(error.message) from None
def basic_credentials(raw: str) -> str:
    """``user:password`` for HTTP basic auth: both parts non-empty, no control characters; never repeated."""
    user, colon, password = raw.partition(":")
    if not colon or not user or not password or not raw.isprintable():
        raise ValueError("must be user:password, both non-empty (the credentials set in the webhook's URL)")
    return raw


def ecdsa_p256_public_key(raw: str) -> Any:
    """An ECDSA P-256 public key from base64 DER (SubjectPublicKeyInfo), as SendGrid shows its verification key."""
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_der_public_key

    try:
        key = load_der_public_key(base64.b64decode(raw.strip(), validate=True))
    except (binascii.Error, ValueError):
        raise ValueError("is not a base64 DER public key") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ValueError("must be an ECDSA P-256 public key, as SendGrid gives")
    return key
