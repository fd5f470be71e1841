"""The suite's one set of keys: made-up bytes, the same in every test, every CLI run and every subprocess.

Each key exists in two shapes: the object the code takes (``TEST_KEYS``) and
the setting an operator would write (``TOKEN_KEYS_SETTING``), built from the
same bytes so that a token the CLI derives is one the test can derive too.
"""

from __future__ import annotations

import base64

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from domain.tokens import TokenKeys


def key_setting(keys: dict[str, bytes], *, padded: bool = False) -> str:
    """``id:base64key,...`` as AUTHLEDGER_TOKEN_KEYS and AUTHLEDGER_MASTER_KEY take them, in the given order."""
    encode = (lambda raw: base64.urlsafe_b64encode(raw).decode()) if padded else (
        lambda raw: base64.urlsafe_b64encode(raw).decode().rstrip("="))
    return ",".join(f"{key_id}:{encode(raw)}" for key_id, raw in keys.items())


# Token keys: k2 signs what is new, k1 still verifies what it signed before a rotation.
TEST_KEYS = TokenKeys(current_id="k2", keys={"k2": b"k" * 32, "k1": b"o" * 32})
TOKEN_KEYS_SETTING = key_setting(TEST_KEYS.keys)

# The master key that seals personal data (infra/eventlog/subject_keys.py), and two that are not it:
# a newer one to rotate to, and one with the same id but other bytes, as a mistyped key would be.
TEST_MASTER_KEY = key_setting({"test": b"m" * 32}, padded=True)
NEW_MASTER_KEY = key_setting({"m2": b"n" * 32}, padded=True)
WRONG_MASTER_KEY = key_setting({"test": b"w" * 32}, padded=True)

# Ed25519 seeds for the audit digest: the one the service signs with, and a stranger's.
SIGNING_KEY = base64.b64encode(bytes(range(32))).decode()
OTHER_SIGNING_KEY = base64.b64encode(bytes(range(100, 132))).decode()
TEST_SIGNING_KEY = Ed25519PrivateKey.from_private_bytes(base64.b64decode(SIGNING_KEY))  # the same, as an object
