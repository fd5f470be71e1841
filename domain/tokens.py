"""Derivation of reset tokens and OTP codes from configured keys.

Nothing secret is ever stored in the clear: a token or code is recomputed on
demand from a key (which lives in configuration, never in the database), the
id of the request it belongs to and, since derivation 2, the request's
secret nonce. Events keep the key id, the derivation, the nonce sealed under
the user's data key (a personal field, so `privacy forget` destroys it and
with it every outstanding link and code), and for reset tokens a SHA-256
hash to look the request up by.

Derivations:

- 1: HMAC-SHA256(key, label + request id). Requests made before nonces; a
  leaked key plus the public request id yields the token, which is why
  new requests no longer use it. Kept so that they verify until they expire.
- 2: HMAC-SHA256(key, label + request id + ":" + nonce). Key plus public id
  is no longer enough; the nonce is only readable while the user's data key
  exists.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Mapping
from types import MappingProxyType
from uuid import UUID

from attrs import field, frozen

from domain.errors import ConfigError

# What derivation accepts: challenges issued before the 6-digit floor of new
# configuration (domain.policy.OTP_DIGITS_FLOOR) keep their 4 or 5 digits.
MIN_OTP_DIGITS = 4
MAX_OTP_DIGITS = 10

DERIVATION_V1 = 1  # key + request id: requests made before nonces
DERIVATION_V2 = 2  # key + request id + secret nonce
CURRENT_DERIVATION = DERIVATION_V2
NONCE_BYTES = 32
# A nonce as events hold it (once opened): 32 random bytes, base64url without padding.
_NONCE_SHAPE = re.compile(r"[A-Za-z0-9_-]{43}")


class SecretUnavailable(Exception):
    """The token or code of a request cannot be derived: its nonce is erased or unreadable.

    Callers answer as they answer an unknown token or code.
    """


def derivation_nonce(derivation: int, nonce: str | None) -> str | None:
    """The nonce to derive a request's secret with: None for derivation 1.

    ``SecretUnavailable`` when derivation 2's nonce cannot be read (erased).
    """
    if not nonce_readable(derivation, nonce):
        raise SecretUnavailable("the request's nonce is erased or unreadable")
    return nonce if derivation == DERIVATION_V2 else None


def nonce_text(random_bytes: bytes) -> str:
    """A nonce as events carry it, from ``NONCE_BYTES`` random bytes (the caller's randomness)."""
    if len(random_bytes) != NONCE_BYTES:
        raise ValueError(f"a nonce needs {NONCE_BYTES} random bytes, got {len(random_bytes)}")
    return base64.urlsafe_b64encode(random_bytes).rstrip(b"=").decode("ascii")


def nonce_readable(derivation: int, nonce: str | None) -> bool:
    """Whether a request's secret can still be derived: derivation 1 needs no nonce, 2 a readable one.

    An erased nonce reads ``[erased]`` (or whatever the keyring says), never the shape of a nonce.
    """
    if derivation == DERIVATION_V1:
        return True
    return derivation == DERIVATION_V2 and isinstance(nonce, str) and _NONCE_SHAPE.fullmatch(nonce) is not None


def _freeze_keys(keys: Mapping[str, bytes]) -> Mapping[str, bytes]:
    # A read-only copy: the caller's dict can change later, our keys cannot.
    return MappingProxyType(dict(keys))


@frozen
class TokenKeys:
    """The configured HMAC keys by key id, newest first.

    ``current_id`` names the key that signs new requests; older keys stay so
    that requests issued before a rotation still verify until they expire.
    """

    current_id: str
    # repr=False: a TokenKeys that ends up in a log line or traceback must not
    # print the key material.
    keys: Mapping[str, bytes] = field(converter=_freeze_keys, repr=False)

    def __attrs_post_init__(self) -> None:
        if not self.keys:
            raise ConfigError("no token keys are configured")
        for key_id, key in self.keys.items():
            if not isinstance(key_id, str) or not key_id:
                raise ConfigError("token key ids must be non-empty strings")
            if not isinstance(key, bytes) or not key:
                raise ConfigError(f"token key {key_id!r} must be non-empty bytes")
        if self.current_id not in self.keys:
            raise ConfigError(f"the current token key id {self.current_id!r} is not configured")

    def key(self, key_id: str) -> bytes:
        """The key with this id; ``ConfigError`` when it is not configured."""
        try:
            return self.keys[key_id]
        except KeyError:
            raise ConfigError(f"token key id {key_id!r} is not configured") from None

    @property
    def current(self) -> bytes:
        """The key that signs new requests."""
        return self.keys[self.current_id]


def _hmac(key: bytes, label: bytes, request_id: UUID, nonce: str | None) -> bytes:
    """Derivation 1 without a nonce, 2 with one; ``SecretUnavailable`` for a nonce that is not one."""
    message = label + str(request_id).encode("ascii")
    if nonce is not None:
        if not nonce_readable(DERIVATION_V2, nonce):
            raise SecretUnavailable("the request's nonce is erased or unreadable")
        message += b":" + nonce.encode("ascii")
    return hmac.new(key, message, hashlib.sha256).digest()


def derive_reset_token(key: bytes, request_id: UUID, nonce: str | None = None) -> str:
    """The reset token of a request: base64url, unpadded, of HMAC-SHA256.

    ``nonce`` None is derivation 1 (requests made before nonces); with a nonce, derivation 2.
    """
    digest = _hmac(key, b"reset:", request_id, nonce)
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def hash_token(token: str) -> str:
    """Hex SHA-256 of a token: what events store and lookups use.

    A plain hash is enough (no salt, no slow KDF) because the token carries
    256 bits of HMAC output: there is nothing to brute-force.
    """
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_otp_digits(digits: int) -> None:
    """Raise ``ConfigError`` unless ``digits`` is a supported code length."""
    if isinstance(digits, bool) or not isinstance(digits, int):
        raise ConfigError(f"OTP digits must be an integer, got {digits!r}")
    if not MIN_OTP_DIGITS <= digits <= MAX_OTP_DIGITS:
        raise ConfigError(
            f"OTP digits must be between {MIN_OTP_DIGITS} and {MAX_OTP_DIGITS}, got {digits}"
        )


def derive_otp_code(key: bytes, challenge_id: UUID, digits: int, nonce: str | None = None) -> str:
    """The OTP code of a challenge: HMAC-SHA256 as a big-endian integer,
    modulo 10**digits, zero-padded. ``nonce`` as for ``derive_reset_token``.

    Reducing a 256-bit number modulo at most 10**10 leaves a bias far below
    anything measurable, so no rejection sampling is needed.
    """
    check_otp_digits(digits)
    number = int.from_bytes(_hmac(key, b"otp:", challenge_id, nonce), "big")
    return str(number % 10**digits).zfill(digits)


def otp_code_matches(
    key: bytes, challenge_id: UUID, digits: int, candidate: str, nonce: str | None = None
) -> bool:
    """Whether ``candidate`` is the challenge's code, compared in constant time."""
    expected = derive_otp_code(key, challenge_id, digits, nonce)
    # Compare bytes: compare_digest refuses non-ASCII str, and a candidate is
    # untrusted input that may contain anything.
    return hmac.compare_digest(expected.encode("ascii"), candidate.encode("utf-8"))
