"""Signed digests of the chain head: Ed25519 keys from configuration, digest documents and their checks.

A digest says "the chain reached index n at position p with link L", signed
by the operator's key. Stored outside the database, it lets anyone prove
later that the log still extends it: someone able to rewrite both events and
seals cannot forge the signature. Keys never come from the database and
never appear in a message.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attrs import frozen
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from domain.errors import ConfigError, InvalidInput
from infra.errors import DigestInvalid
from infra.config.settings import DEV_KEY_FILES, Settings
from infra.config.values import parse_signing_key
from infra.logs import log_event
from projections.audit_chain import Seal, canonical_json

log = logging.getLogger("authledger.audit")

DIGEST_FORMAT = "authledger-digest/1"
RAW = serialization.Encoding.Raw, serialization.PublicFormat.Raw

MISSING_KEY = (
    "no signing key: set AUTHLEDGER_SIGNING_KEY to the base64 of a raw 32-byte Ed25519 private key, "
    "or AUTHLEDGER_SIGNING_KEY_FILE to a PEM file holding one"
)


def signing_key(settings: Settings) -> Ed25519PrivateKey:
    """The operator's Ed25519 key from configuration; ConfigError (never the key) when absent or unusable.

    On the embedded default with neither variable set, a development key generated once into the data
    directory, as the development token and master keys are (``infra.keys``): the quick start's ``audit
    digest``, ``audit public-key`` and the console's signed downloads work as they will in production.
    """
    if settings.signing_key:
        try:
            return Ed25519PrivateKey.from_private_bytes(parse_signing_key(settings.signing_key))
        except ValueError as error:
            raise ConfigError(f"AUTHLEDGER_SIGNING_KEY {error}") from None
    if settings.signing_key_file:
        return _key_from_file(settings.signing_key_file)
    if settings.database_url is None:
        return _key_from_file(_dev_signing_key_file(settings.data_dir))
    raise ConfigError(MISSING_KEY)


def _dev_signing_key_file(data_dir: Path) -> Path:
    """The development signing key's PEM file (mode 0600), made by the first process that needs it."""
    path = data_dir / DEV_KEY_FILES["signing_key"]
    if path.exists():
        return path
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path  # another process made it first; use theirs
    with os.fdopen(descriptor, "wb") as file:
        file.write(pem)
    log_event(log, "generated a development audit signing key; set AUTHLEDGER_SIGNING_KEY or "
              "AUTHLEDGER_SIGNING_KEY_FILE in production", logging.WARNING, path=str(path))
    return path


def _key_from_file(path: Path) -> Ed25519PrivateKey:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"AUTHLEDGER_SIGNING_KEY_FILE {path}: {error.strerror or error}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise ConfigError(
            f"AUTHLEDGER_SIGNING_KEY_FILE {path}: not an unencrypted PEM private key "
            "(make one with `openssl genpkey -algorithm ed25519`)"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"AUTHLEDGER_SIGNING_KEY_FILE {path}: the key is not an Ed25519 key")
    return key


def configured_public_key(settings: Settings) -> Ed25519PublicKey | None:
    """The public half of the configured key (or of the development key, once made); None without one."""
    made = settings.database_url is None and (settings.data_dir / DEV_KEY_FILES["signing_key"]).exists()
    if not (settings.signing_key or settings.signing_key_file or made):
        return None
    return signing_key(settings).public_key()


def parse_public_key(spec: str) -> Ed25519PublicKey:
    """A trusted public key: the base64 of its 32 raw bytes, or a PEM file."""
    path = Path(spec)
    if path.is_file():
        try:
            key = serialization.load_pem_public_key(path.read_bytes())
        except (OSError, ValueError, UnsupportedAlgorithm):
            raise InvalidInput(f"public key file {path} is not a PEM public key") from None
        if not isinstance(key, Ed25519PublicKey):
            raise InvalidInput(f"public key file {path} does not hold an Ed25519 key")
        return key
    try:
        return Ed25519PublicKey.from_public_bytes(_b64decode(spec))
    except ValueError:
        raise InvalidInput(
            "--public-key must be a PEM file or the base64 of a raw 32-byte Ed25519 public key") from None


def raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(*RAW)


def public_key_text(key: Ed25519PublicKey, *, pem: bool = False) -> str:
    """The public key as ``--public-key`` takes it: base64 of the 32 raw bytes, or PEM."""
    if pem:
        return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return base64.b64encode(raw_public(key)).decode()


def fingerprint(public: bytes) -> str:
    """A short, stable name for a public key, safe to print and compare by eye."""
    return "ed25519:" + hashlib.sha256(public).hexdigest()[:32]


def _b64decode(value: str) -> bytes:
    try:
        return base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not base64") from None


@frozen
class Digest:
    """A signed chain head; ``segment`` is (first index, anchor link) for an export's stretch."""

    chain_index: int
    global_position: int
    transaction_id: int
    link: bytes
    created_at: str
    public_key: bytes
    signature: bytes
    segment: tuple[int, bytes] | None = None

    @property
    def key_id(self) -> str:
        return fingerprint(self.public_key)


def sign_digest(
    head: Seal, key: Ed25519PrivateKey, *, created_at: str, segment: tuple[int, bytes] | None = None
) -> dict[str, Any]:
    """The digest document of ``head``, signed over the canonical JSON of every other field."""
    public = raw_public(key.public_key())
    body: dict[str, Any] = {
        "format": DIGEST_FORMAT,
        "chain_index": head.chain_index,
        "global_position": head.global_position,
        "transaction_id": head.transaction_id,
        "link": head.link.hex(),
        "created_at": created_at,
        "key_id": fingerprint(public),
        "public_key": base64.b64encode(public).decode(),
    }
    if segment is not None:
        body["segment"] = {"first_index": segment[0], "anchor": segment[1].hex()}
    return {**body, "signature": base64.b64encode(key.sign(canonical_json(body))).decode()}


def parse_digest(document: Any, source: str) -> Digest:
    """Check a digest's shape and signature (against the key it names); DigestInvalid if either fails."""
    if not isinstance(document, Mapping) or document.get("format") != DIGEST_FORMAT:
        raise DigestInvalid(f"{source} is not an authledger digest (format {DIGEST_FORMAT})")
    body = {name: value for name, value in document.items() if name != "signature"}
    try:
        segment = document.get("segment")
        digest = Digest(
            chain_index=_whole(document["chain_index"]),
            global_position=_whole(document["global_position"]),
            transaction_id=_whole(document["transaction_id"]),
            link=_hash(document["link"]),
            created_at=str(document["created_at"]),
            public_key=_b64decode(document["public_key"]),
            signature=_b64decode(document["signature"]),
            segment=(_whole(segment["first_index"]), _hash(segment["anchor"])) if segment is not None else None,
        )
        public = Ed25519PublicKey.from_public_bytes(digest.public_key)
    except (KeyError, TypeError, ValueError, AttributeError):
        raise DigestInvalid(f"{source} is corrupt: a field is missing or malformed") from None
    if document.get("key_id") != digest.key_id:
        raise DigestInvalid(f"{source} is corrupt: its key_id does not name its public key")
    try:
        public.verify(digest.signature, canonical_json(body))
    except InvalidSignature:
        raise DigestInvalid(f"{source}: the signature does not verify; the digest was changed after signing") from None
    return digest


def check_trust(digest: Digest, trusted: Ed25519PublicKey | None, source: str) -> bool:
    """True when a trusted key signed it; False when only the key inside the file vouches for it."""
    if trusted is None:
        return False
    expected = raw_public(trusted)
    if digest.public_key != expected:
        raise DigestInvalid(
            f"{source} was signed by key {digest.key_id}, not by the trusted key {fingerprint(expected)}"
        )
    return True


def _whole(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError("not a whole number")
    return value


def _hash(value: Any) -> bytes:
    raw = bytes.fromhex(value)
    if len(raw) != 32:
        raise ValueError("not a SHA-256 hash")
    return raw


def read_digest_file(path: Path) -> Digest:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidInput(f"cannot read digest {path}: {getattr(error, 'strerror', None) or error}") from None
    try:
        document = json.loads(text)
    except ValueError:
        raise DigestInvalid(f"digest {path} is corrupt: not JSON") from None
    return parse_digest(document, f"digest {path}")


def write_digest_file(path: Path, document: Mapping[str, Any]) -> None:
    """Write the digest, creating missing folders on the way (digests/ on a first run)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    except OSError as error:
        raise InvalidInput(f"cannot write digest {path}: {error.strerror or error}") from None
