"""Webhook secrets sealed at rest: AES-256-GCM under the newest master key, bound to where the secret belongs.

The raw secret is shown once, when it is made, and kept nowhere: the events
and ``webhook_endpoints`` hold only its sealed form, which names the master
key (``AUTHLEDGER_MASTER_KEY``) that opens it, so a dump of the database
alone signs nothing. The binding (tenant, endpoint, secret id) stops a sealed
secret copied onto another endpoint from opening there.
"""

from __future__ import annotations

import base64
import json
import secrets

from cryptography.exceptions import InvalidTag

from domain.errors import ConfigError
from domain.webhooks import SECRET_BYTES, SealedSecret, secret_text
from infra.eventlog.subject_keys import MASTER_KEY_VARIABLE, MasterKeys

def _binding(tenant: str, endpoint_id: str, secret_id: str) -> bytes:
    return json.dumps(["authledger-webhook-secret-v1", tenant, endpoint_id, secret_id],
                      separators=(",", ":")).encode("utf-8")


def new_secret(master: MasterKeys, *, tenant: str, endpoint_id: str) -> tuple[str, SealedSecret]:
    """A fresh secret: its ``whsec_`` text (to show once) and its sealed form (to record)."""
    raw = secrets.token_bytes(SECRET_BYTES)
    secret_id = "sec_" + secrets.token_hex(8)
    master_key_id, sealed = master.seal(raw, _binding(tenant, endpoint_id, secret_id))
    return secret_text(raw), SealedSecret(secret_id, master_key_id, base64.b64encode(sealed).decode("ascii"))


def open_secret(master: MasterKeys, sealed: SealedSecret, *, tenant: str, endpoint_id: str) -> bytes:
    """The secret's bytes; ``ConfigError`` when the master key that sealed it is not configured."""
    try:
        return master.open(sealed.master_key_id, base64.b64decode(sealed.sealed),
                           _binding(tenant, endpoint_id, sealed.secret_id))
    except KeyError:
        raise ConfigError(f"webhook endpoint {endpoint_id}'s secret is sealed by master key "
                          f"{sealed.master_key_id!r}, which {MASTER_KEY_VARIABLE} does not hold; keep older ids "
                          "listed after a rotation") from None
    except InvalidTag:
        raise ConfigError(f"master key {sealed.master_key_id!r} does not open webhook endpoint {endpoint_id}'s "
                          "secret (a different key under that id, or the row was altered)") from None
