"""Per-user data keys in ``subject_keys``, wrapped by a master key from configuration.

Each user whose events hold personal data has a random 32-byte data key,
created on the first write, in the transaction of that write. That write
holds the lock of one of the user's request streams (a decision of
``infra.services.unit_of_work``), and so does an erasure, for all of them,
before it reads the keys to destroy: until the write commits, its key is
invisible to others, and the erasure waits rather than miss it. The key is stored
only wrapped (AES-256-GCM under the newest master key of
``AUTHLEDGER_MASTER_KEY``, bound to the user and key id), so a dump of the
database alone reads nothing. ``subject_keys`` is the one table whose rows
may be deleted: deleting a row is what erases a user (``infra.services.privacy``).

Master keys come from configuration, never the database. The composition
root binds them to its engines (``bind_master_keys``); an engine nobody
bound reads ``AUTHLEDGER_MASTER_KEY`` from the environment. They are only
needed when a key is wrapped or unwrapped, so commands that touch no
personal data run without one.

Unwrapped keys are cached by one ``PostgresKeyring``, which lives as long as
the event store of one unit of work: a key destroyed by ``privacy forget``
is never used again by a later transaction.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from attrs import frozen
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import Connection, Engine, text

from domain.errors import ConfigError
from infra.config.values import parse_master_keys
from infra.db.identity import database_identity
from infra.db.pipeline import execute_deferred
from infra.eventlog.ids import time_ordered_id
from infra.eventlog.tags import PERSONAL_FIELDS
from infra.eventlog.personal_data import NONCE_BYTES, DataKeyring, envelope_key_ids

MASTER_KEY_VARIABLE = "AUTHLEDGER_MASTER_KEY"
MASTER_KEYS_OPTION = "authledger_master_keys"  # an execution option of bound engines

# The oldest key the transaction sees: two writers that created a user's
# first key at once each kept theirs, and from then on everyone uses one.
SELECT_BY_USER = text("""
    SELECT key_id, master_key_id, wrapped_key FROM subject_keys WHERE user_id = :user_id
     ORDER BY created_at, key_id LIMIT 1
""")
SELECT_BY_KEY_IDS = text("""
    SELECT user_id, key_id, master_key_id, wrapped_key FROM subject_keys WHERE key_id = ANY(:key_ids)
""")
SAMPLE_UNDER_MASTER = text("""
    SELECT user_id, key_id, master_key_id, wrapped_key FROM subject_keys WHERE master_key_id = :master_key_id LIMIT 1
""")
INSERT_KEY = text("""
    INSERT INTO subject_keys (key_id, user_id, master_key_id, wrapped_key)
    VALUES (:key_id, :user_id, :master_key_id, :wrapped_key)
""")
DELETE_KEYS = text("DELETE FROM subject_keys WHERE user_id = :user_id RETURNING key_id")


def _wrapping_aad(user_id: str, key_id: str) -> bytes:
    return json.dumps(["authledger-subject-key-v1", user_id, key_id], separators=(",", ":")).encode("utf-8")


@frozen
class MasterKeys:
    """Master keys by id, newest first: the newest wraps new data keys, every one still unwraps."""

    keys: Mapping[str, bytes]

    @classmethod
    def parse(cls, raw: str) -> MasterKeys:
        try:
            return cls(parse_master_keys(raw))
        except ValueError as error:
            raise ConfigError(f"{MASTER_KEY_VARIABLE} {error}") from None

    @property
    def current_id(self) -> str:
        return next(iter(self.keys))

    def seal(self, plaintext: bytes, binding: bytes) -> tuple[str, bytes]:
        """``plaintext`` under the newest master key (AES-256-GCM), bound to ``binding``: its id, nonce + sealed.

        The one sealing of secrets at rest: users' data keys here, webhook secrets
        (``infra.services.webhook_secrets``) too, each with a binding of its own.
        """
        nonce = os.urandom(NONCE_BYTES)
        return self.current_id, nonce + AESGCM(self.keys[self.current_id]).encrypt(nonce, plaintext, binding)

    def open(self, master_key_id: str, sealed: bytes, binding: bytes) -> bytes:
        """What ``seal`` sealed; ``KeyError`` when no key has that id, ``InvalidTag`` when it does not open it."""
        return AESGCM(self.keys[master_key_id]).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], binding)

    def wrap(self, user_id: str, key_id: str, data_key: bytes) -> tuple[str, bytes]:
        return self.seal(data_key, _wrapping_aad(user_id, key_id))

    def unwrap(self, user_id: str, key_id: str, master_key_id: str, wrapped: bytes) -> bytes:
        try:
            return self.open(master_key_id, wrapped, _wrapping_aad(user_id, key_id))
        except KeyError:
            raise ConfigError(
                f"the data key of user {user_id!r} is wrapped by master key {master_key_id!r}, which "
                f"{MASTER_KEY_VARIABLE} does not hold (it holds {', '.join(self.keys)}); after a rotation "
                "keep the older ids listed after the new one until `authledger privacy rewrap` has moved their keys"
            ) from None
        except InvalidTag:
            raise ConfigError(
                f"master key {master_key_id!r} does not unwrap the data key of user {user_id!r}: "
                f"{MASTER_KEY_VARIABLE} holds a different key under that id (or the row was altered)"
            ) from None


MasterKeySource = Callable[[], MasterKeys]


@functools.cache
def _parsed(raw: str) -> MasterKeys:
    return MasterKeys.parse(raw)


def master_keys_from_environment() -> MasterKeys:
    raw = os.environ.get(MASTER_KEY_VARIABLE, "")
    if not raw:
        raise ConfigError(
            f"{MASTER_KEY_VARIABLE} is not set: personal data is encrypted under a master key "
            f"({MASTER_KEY_VARIABLE}=id:base64key, 32 bytes; see docs/operations.md)"
        )
    return _parsed(raw)


def bind_master_keys(engine: Engine, source: MasterKeySource) -> Engine:
    """The same engine (and pool), its connections carrying where their master keys come from."""
    return engine.execution_options(**{MASTER_KEYS_OPTION: source})


def master_keys_for(connection: Connection) -> MasterKeys:
    source = connection.get_execution_options().get(MASTER_KEYS_OPTION)
    return source() if source is not None else master_keys_from_environment()


class PostgresKeyring(DataKeyring):
    """Data keys of ``subject_keys`` on one connection, inside the caller's transaction."""

    def __init__(self, connection: Connection, master: MasterKeySource | None = None) -> None:
        self.connection = connection
        self._source = master or functools.partial(master_keys_for, connection)
        self._master: MasterKeys | None = None
        self._checked_master = False
        self._by_id: dict[str, bytes | None] = {}  # None: the key was destroyed
        self._by_user: dict[str, str] = {}  # the key each user's new data is sealed under
        self._keyless: set[str] = set()  # users this transaction saw without a key

    @property
    def master(self) -> MasterKeys:
        if self._master is None:
            self._master = self._source()
        return self._master

    def prefetch(self, rows: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
        """Load the keys a page of (event type, payload) rows needs in one query rather than one per user."""
        missing = envelope_key_ids(rows, PERSONAL_FIELDS) - self._by_id.keys()
        if missing:
            self._load(missing)

    def remember(self, rows: Iterable[tuple[str, str, str, bytes]]) -> None:
        """Keep, for reading, keys the caller read with its own query: (user_id, key_id, master_key_id, wrapped_key).

        Not for writing: which of a user's keys new data is sealed under is
        ``writing_key``'s choice.
        """
        for user_id, key_id, master_key_id, wrapped in rows:
            if key_id not in self._by_id:
                self._by_id[key_id] = self.master.unwrap(user_id, key_id, master_key_id, bytes(wrapped))

    def expect_keys(self, user_id: str, rows: Sequence[tuple[str, str, bytes]]) -> None:
        """All of the user's keys, read by the caller's own statement: (key_id, master_key_id, wrapped_key),
        oldest first as ``SELECT_BY_USER`` orders them, so that the first is the one ``writing_key`` would
        find; none when the user has no key yet, and then a write creates one without asking again.

        A decision reads them with its stream, in the same transaction (and
        under the same stream lock) as the write it makes. An envelope naming
        a key not among them was sealed under a key since destroyed, or
        another user's: ``reading_key`` asks for it.
        """
        if not rows:
            self._keyless.add(user_id)
            return
        self.remember((user_id, *row) for row in rows)
        self._by_user[user_id] = rows[0][0]  # the oldest: the one to write with

    def reading_key(self, key_id: str) -> bytes | None:
        if key_id not in self._by_id:
            self._load({key_id})
        return self._by_id[key_id]

    def writing_key(self, user_id: str) -> tuple[str, bytes]:
        key_id = self._by_user.get(user_id) or self._find_or_create(user_id)
        key = self._by_id[key_id]
        assert key is not None
        return key_id, key

    def _remember(self, user_id: str, key_id: str, master_key_id: str, wrapped: bytes) -> str:
        self._by_id[key_id] = self.master.unwrap(user_id, key_id, master_key_id, bytes(wrapped))
        self._by_user[user_id] = key_id
        return key_id

    def _load(self, key_ids: set[str]) -> None:
        rows = self.connection.execute(SELECT_BY_KEY_IDS, {"key_ids": sorted(key_ids)})
        # For reading: a key read here is not therefore the one to write with (the oldest is).
        self.remember((row.user_id, row.key_id, row.master_key_id, row.wrapped_key) for row in rows)
        for key_id in key_ids - self._by_id.keys():
            self._by_id[key_id] = None

    def _find_or_create(self, user_id: str) -> str:
        row = (None if user_id in self._keyless
               else self.connection.execute(SELECT_BY_USER, {"user_id": user_id}).first())
        if row is not None:
            return self._remember(user_id, row.key_id, row.master_key_id, row.wrapped_key)
        # Created in the caller's transaction, so a write that rolls back
        # leaves no key behind. user_id is deliberately not unique: with a
        # unique key, a second writer's insert would wait for the first
        # writer's whole transaction (and two that each hold one user's new
        # key and want the other's would deadlock); here each keeps its own.
        self._check_master()
        # A time-ordered id, as the log's own (infra/eventlog/ids.py): a random one landed each new user's key
        # in a random leaf of subject_keys_pkey, on a 10M-event log a page read from disk and a full-page
        # image in the WAL (bench/RESULTS.md, "Reset create on the large log").
        key_id, key = time_ordered_id().hex, AESGCM.generate_key(bit_length=256)
        master_key_id, wrapped = self.master.wrap(user_id, key_id, key)
        execute_deferred(self.connection, INSERT_KEY, {
            "key_id": key_id, "user_id": user_id, "master_key_id": master_key_id, "wrapped_key": wrapped,
        })
        self._by_id[key_id], self._by_user[user_id] = key, key_id
        return key_id

    def _check_master(self) -> None:
        """Refuse a wrong master key before it wraps anything: unwrap one key it wrapped before.

        Once that has worked in this process for a database, key id and key,
        it needs no asking again (``_PROVEN``): the rows it unwrapped stay
        wrapped by those bytes, so the answer cannot change. Until a key
        exists under the id there is nothing to prove, and every new user's
        transaction asks again.
        """
        if self._checked_master:
            return
        proof = _proof_of(self.connection, self.master)
        if proof not in _PROVEN:
            row = self.connection.execute(SAMPLE_UNDER_MASTER, {"master_key_id": self.master.current_id}).first()
            if row is not None:
                self.master.unwrap(row.user_id, row.key_id, row.master_key_id, bytes(row.wrapped_key))
                _PROVEN.add(proof)
        self._checked_master = True


# (database, master key id, digest of its bytes) whose key unwrapped a data key of that database in this process.
_PROVEN: set[tuple[str, str, bytes]] = set()


def _proof_of(connection: Connection, master: MasterKeys) -> tuple[str, str, bytes]:
    # The key's bytes only as a digest.
    database = database_identity(connection.engine)
    current = master.current_id
    return database, current, hashlib.sha256(master.keys[current]).digest()


def keyring_for(connection: Connection, rows: Iterable[tuple[str, Mapping[str, Any]]] = ()) -> PostgresKeyring:
    """A keyring on ``connection``, with the keys of these (event type, payload) rows loaded in one query."""
    keyring = PostgresKeyring(connection)
    keyring.prefetch(rows)
    return keyring


def destroy_keys(connection: Connection, user_id: str) -> list[str]:
    """Delete the user's data keys; the ids of the keys destroyed (none when there were none)."""
    return sorted(connection.execute(DELETE_KEYS, {"user_id": user_id}).scalars())
