"""`authledger privacy rewrap`: move every data key onto the newest master key, so older ones can retire.

Without this an old master key id stays in ``AUTHLEDGER_MASTER_KEY`` for as
long as a data key it wrapped exists. Re-wrapping unwraps each such data key
and wraps the same key again under the newest master key: the data key and
its id do not change, so no event is touched and every ciphertext in the log
opens as before. Only ``master_key_id`` and ``wrapped_key`` of
``subject_keys`` rows change (the one table the application may update).

Safe beside running traffic and safe to re-run after a crash:

- Batches of a few hundred keys, each in a short transaction of its own, so
  a large table never holds one long transaction or lock.
- Rows are taken ``FOR UPDATE SKIP LOCKED``: a row an erasure is deleting
  right now is left for the next run instead of waited for, and an erasure
  that waits for a batch deletes the re-wrapped row after it commits.
  Erased users have no row, so there is nothing of theirs to re-wrap.
- Each batch appends ``DataKeysRewrapped`` to the ``master-keys`` stream in
  its own transaction, so the log counts exactly the keys moved even when a
  run stops half way; a re-run continues with whatever is still left.
- Every master key id still in use is checked before anything is written: an
  id not configured, or a different key under a known id, is a
  ``ConfigError`` and nothing changes.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from attrs import frozen
from sqlalchemy import Connection, text
from sqlalchemy.exc import ProgrammingError

from domain.errors import ConfigError
from infra.clock import Clock
from infra.errors import SchemaMismatch
from domain.privacy import MASTER_KEYS_STREAM, decide_rewrap
from infra.eventlog.postgres import PostgresEventStore
from infra.eventlog.subject_keys import MASTER_KEY_VARIABLE, SAMPLE_UNDER_MASTER, MasterKeys
from infra.services.unit_of_work import ServiceContext, append_and_fold

DEFAULT_BATCH_SIZE = 500
INSUFFICIENT_PRIVILEGE = "42501"

PENDING_BY_MASTER = text("""
    SELECT master_key_id, count(*) AS keys FROM subject_keys WHERE master_key_id <> :current
     GROUP BY master_key_id ORDER BY master_key_id
""")
# Two runs at once take turns batch by batch, so their appends to the
# master-keys stream never clash; service traffic never takes this lock.
BATCH_LOCK = text("SELECT pg_advisory_xact_lock(hashtext('authledger privacy rewrap'))")
# Keyset pagination (key_id > :after): each batch starts where the last one
# ended instead of scanning past every key already moved.
LOCK_BATCH = text("""
    SELECT user_id, key_id, master_key_id, wrapped_key FROM subject_keys
     WHERE master_key_id <> :current AND key_id > :after
     ORDER BY key_id LIMIT :limit
       FOR UPDATE SKIP LOCKED
""")
REWRAP = text("""
    UPDATE subject_keys AS k SET master_key_id = :master_key_id, wrapped_key = n.wrapped_key
      FROM unnest(CAST(:key_ids AS text[]), CAST(:wrapped_keys AS bytea[])) AS n(key_id, wrapped_key)
     WHERE k.key_id = n.key_id
""")


@frozen
class Rewrap:
    """What a run did (or, dry, would do), by the old master key id the keys were wrapped under."""

    master_key_id: str
    dry_run: bool
    rewrapped: Mapping[str, int]
    remaining: Mapping[str, int]  # still under an old id: locked by a writer, or written meanwhile

    def as_dict(self) -> dict[str, Any]:
        olds = sorted({*self.rewrapped, *self.remaining})
        return {
            "master_key_id": self.master_key_id, "dry_run": self.dry_run,
            "rewrapped": sum(self.rewrapped.values()), "remaining": sum(self.remaining.values()),
            "by_master_key_id": {old: {"rewrapped": self.rewrapped.get(old, 0),
                                       "remaining": self.remaining.get(old, 0)} for old in olds},
        }

    def summary(self) -> str:
        if not self.rewrapped and not self.remaining:
            return f"nothing to do: every data key is wrapped under master key {self.master_key_id}"
        by_old = ", ".join(f"{old}: {n}" for old, n in sorted(self.remaining.items()))
        if self.dry_run:
            return (f"dry run: {sum(self.remaining.values())} data keys would be re-wrapped under master key "
                    f"{self.master_key_id} ({by_old}); nothing changed")
        lines = [f"re-wrapped {sum(self.rewrapped.values())} data keys under master key {self.master_key_id}"]
        lines += [f"  {old}: {self.rewrapped.get(old, 0)} re-wrapped, {self.remaining.get(old, 0)} remain"
                  for old in sorted({*self.rewrapped, *self.remaining})]
        if self.remaining:
            lines.append(f"still under older master keys: {sum(self.remaining.values())} (held by another "
                         "transaction, or written by a process that does not list the newest key first); run again")
        else:
            lines.append(f"no data key is wrapped under an older master key now; see docs/operations.md before "
                         f"removing {', '.join(sorted(self.rewrapped))} from {MASTER_KEY_VARIABLE}")
        return "\n".join(lines)


def pending(ctx: ServiceContext, master: MasterKeys, *, check: bool = False) -> dict[str, int]:
    """How many data keys each master key id other than the newest still wraps.

    With ``check``, first a ``ConfigError`` unless ``master`` holds every id in
    use, each able to unwrap a key it wrapped: what a run needs to succeed.
    """
    with ctx.engine.connect() as connection:
        olds = _pending(connection, master)
        if check:
            _check(connection, master, olds)
        return olds


def _pending(connection: Connection, master: MasterKeys) -> dict[str, int]:
    return {row.master_key_id: row.keys
            for row in connection.execute(PENDING_BY_MASTER, {"current": master.current_id})}


def _check(connection: Connection, master: MasterKeys, olds: Mapping[str, int]) -> None:
    """Refuse before writing: every id in use must be configured, and hold the key that wrapped its rows."""
    missing = sorted(old for old in olds if old not in master.keys)
    if missing:
        named = ", ".join(f"{olds[old]} by {old!r}" for old in missing)
        raise ConfigError(
            f"data keys are wrapped by master keys that {MASTER_KEY_VARIABLE} does not hold ({named}; it holds "
            f"{', '.join(master.keys)}): list them after the newest to re-wrap their keys; nothing was changed"
        )
    for master_key_id in [master.current_id, *olds]:
        row = connection.execute(SAMPLE_UNDER_MASTER, {"master_key_id": master_key_id}).first()
        if row is not None:
            master.unwrap(row.user_id, row.key_id, row.master_key_id, bytes(row.wrapped_key))


def rewrap(
    ctx: ServiceContext,
    master: MasterKeys,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    dry_run: bool = False,
    progress: Callable[[int], object] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Rewrap:
    """Re-wrap every data key under an older master key under ``master.current_id``, batch by batch."""
    before = pending(ctx, master, check=True)
    if dry_run or not before:
        return Rewrap(master.current_id, dry_run, {}, before)
    done: Counter[str] = Counter()
    after = ""
    while True:
        try:
            with _may_update(), ctx.engine.begin() as connection:
                moved, after = _rewrap_batch(connection, master, after, batch_size, ctx.clock, metadata)
        except ConfigError as error:  # a row altered, or added under a bad key, since the check
            raise ConfigError(f"{error.message}; that batch was rolled back, and the keys re-wrapped before it "
                              f"({sum(done.values())}) stay re-wrapped") from None
        if not moved:
            break
        done.update(moved)
        if progress is not None:
            progress(sum(moved.values()))
    return Rewrap(master.current_id, False, dict(done), pending(ctx, master))


@contextlib.contextmanager
def _may_update() -> Iterator[None]:
    """A database whose schema.sql predates rotation does not let the application update subject_keys."""
    try:
        yield
    except ProgrammingError as error:
        if getattr(error.orig, "sqlstate", None) == INSUFFICIENT_PRIVILEGE:
            raise SchemaMismatch(
                "the application role may not update subject_keys: run `authledger db init` to apply the "
                "current schema.sql, then run this again"
            ) from None
        raise


def _rewrap_batch(connection: Connection, master: MasterKeys, after: str, limit: int, clock: Clock,
                  metadata: Mapping[str, Any] | None) -> tuple[Counter[str], str]:
    """One transaction: lock a page of keys, re-wrap them, record it; the keys moved and where to go on."""
    connection.execute(BATCH_LOCK)
    rows = connection.execute(LOCK_BATCH, {"current": master.current_id, "after": after, "limit": limit}).all()
    if not rows:
        return Counter(), after
    key_ids, wrapped_keys = [], []
    for row in rows:
        data_key = master.unwrap(row.user_id, row.key_id, row.master_key_id, bytes(row.wrapped_key))
        _, wrapped = master.wrap(row.user_id, row.key_id, data_key)
        key_ids.append(row.key_id)
        wrapped_keys.append(wrapped)
    connection.execute(REWRAP, {"master_key_id": master.current_id, "key_ids": key_ids,
                                "wrapped_keys": wrapped_keys})
    moved = Counter(row.master_key_id for row in rows)
    # Read after BATCH_LOCK: the stream's event times follow the order of its batches.
    events = decide_rewrap(moved, master_key_id=master.current_id, now=clock.now())
    version = PostgresEventStore(connection).stream_version(MASTER_KEYS_STREAM)
    append_and_fold(connection, [(MASTER_KEYS_STREAM, version, events)], metadata)
    return moved, rows[-1].key_id
