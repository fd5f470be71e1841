"""Finding users by email address through a keyed hash, never a plaintext index.

When a reset or OTP request is recorded, its event carries ``address_hmac``:
``"<key id>:<hex HMAC-SHA256>"`` of the normalised recipient, under a key
derived with HKDF from the token key of that id and labelled for this one
purpose (so the index key can never derive a token, nor a token key the
index). The field is personal data, sealed under the user's data key like
the recipient, so once a user is erased it reads ``[erased]``.

The ``address_index`` inline projection (projections/address_index.py) keeps
the hashes per user; ``users_by_address`` hashes the searched address under
every configured key, so requests recorded before a key rotation are found
for as long as their key stays configured.

Requests recorded before this field existed carry no hash and are not found
by address (search by user, request or message id still finds them). A
backfill would have to open every address with the master key and rehash it
with the token keys: `db init` holds neither, and a pure fold may not. See
docs/operations.md, "Personal data and erasure", on finding a user by address.
"""

from __future__ import annotations

import functools
import hashlib
import hmac

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from sqlalchemy import text

from domain.errors import InvalidInput
from domain.tenants import check_tenant_name, split_scoped_user
from domain.tokens import TokenKeys
from infra.services.unit_of_work import ServiceContext

# The HKDF label: a key derived for anything else gets another label.
INDEX_KEY_INFO = b"authledger address index v1"
MAX_ADDRESS = 254  # RFC 5321's limit on a forward path, less the brackets

# The GIN index address_index_hashes (schema.sql) answers the overlap: the
# expression must stay exactly string_to_array(hashes, ' ').
USERS_BY_HASHES = text("""
    SELECT user_id FROM address_index
     WHERE string_to_array(hashes, ' ') && CAST(:candidates AS text[]) AND tenant = :tenant
     ORDER BY user_id
""")


def normalise_address(address: object) -> str:
    """The address as it is hashed: trimmed and lower-cased; ``InvalidInput`` for what is no address.

    Lower-casing the local part too: nearly every mail system treats it
    case-insensitively, and a reviewer typing ``Ada@Example.test`` means
    ``ada@example.test``. The message never repeats the address.
    """
    if not isinstance(address, str):
        raise InvalidInput("an email address is required")
    value = address.strip().lower()
    local, at, domain = value.rpartition("@")
    if not at or not local or not domain or len(value) > MAX_ADDRESS or any(c.isspace() for c in value):
        raise InvalidInput("that is not an email address (expected one address like name@example.com)")
    return value


@functools.lru_cache(maxsize=64)  # derived once per token key, not on every request: the keys are few
def _index_key(token_key: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=INDEX_KEY_INFO).derive(token_key)


def address_hmac(keys: TokenKeys, address: str, key_id: str | None = None) -> str:
    """``"<key id>:<hex HMAC>"`` of the normalised address under ``key_id`` (default: the current key)."""
    key_id = keys.current_id if key_id is None else key_id
    digest = hmac.new(_index_key(keys.key(key_id)), normalise_address(address).encode("utf-8"), hashlib.sha256)
    return f"{key_id}:{digest.hexdigest()}"


def candidate_hmacs(keys: TokenKeys, address: str) -> list[str]:
    """The address's hash under every configured key, newest first: what a search looks for."""
    return [address_hmac(keys, address, key_id) for key_id in keys.keys]


def users_by_address(ctx: ServiceContext, tenant: str, address: str) -> list[str]:
    """The tenant-local ids of the users of ``tenant`` whose requests went to ``address``, sorted.

    Erased users are not found; nor are requests recorded before the index
    existed (module docstring). ``InvalidInput`` for a bad tenant or address.
    """
    check_tenant_name(tenant)
    candidates = candidate_hmacs(ctx.keys, address)
    with ctx.engine.connect() as connection:
        scoped = connection.execute(USERS_BY_HASHES, {"candidates": candidates, "tenant": tenant}).scalars()
        return [split_scoped_user(user_id)[1] for user_id in scoped]
