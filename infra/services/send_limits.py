"""Keeping the counters of ``domain.send_limits`` in the request's own transaction.

A create's decision is made on its user's stream, under that stream's lock
only; two creates for different users that share one address run side by
side. So the counters are not read and then written: one guarded upsert
takes a unit from each counter, ``INSERT ... ON CONFLICT DO UPDATE ... WHERE
count < allowance RETURNING``, and a counter it did not return was full.
PostgreSQL's row lock on the conflicting row makes the check and the bump one
step, so racing creates never take more than the allowance. The rows are
taken in the order of their keys: two calls sharing two counters lock them
in the same order and cannot wait for each other. Only calls sharing a
counter (one address, one IP) ever wait on one another; unrelated addresses
touch unrelated rows.

A full counter raises ``RateLimited`` naming its quota, inside the
transaction: it rolls back, and the refused call writes nothing at all. Only
what queues an email is counted, so a repeat answered with the open request,
a replayed idempotency key or a refusal by the user's own limit takes
nothing. ``limit_counts`` is limiter state, not a projection; its rows of
past windows are deleted by ``serve`` (``delete_past_windows``).

The address and the IP are counted as keyed hashes: the address's index
hash (``infra.services.address_index``), and an HMAC of the IP (or its IPv6
/64) under a key derived for this purpose alone from the token key.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from sqlalchemy import Connection, text

from domain.client_ips import limit_subject
from domain.decisions import Decision
from domain.send_limits import (
    Counter, LimitReached, SendLimits, first_full, send_counters, verify_counters, window_start,
)
from domain.tokens import TokenKeys
from infra.db.pipeline import execute_deferred, execute_read
from infra.errors import RateLimited
from infra.logs import log_event
from infra.services.unit_of_work import Admit, ServiceContext

log = logging.getLogger("authledger.limits")

# The HKDF label of the IP hash key: no other key derived from a token key has it.
IP_KEY_INFO = b"authledger client ip v1"

# One counter per statement, its key a plain parameter: PostgreSQL keeps one generic plan for it.
TAKE = text("""
    INSERT INTO limit_counts AS c (counter, window_start, count, allowance)
    VALUES (:counter, :window_start, 1, :allowance)
        ON CONFLICT (counter, window_start) DO UPDATE SET count = c.count + 1, allowance = EXCLUDED.allowance
     WHERE c.count < EXCLUDED.allowance
    RETURNING c.count
""")
DELETE_PAST = text("DELETE FROM limit_counts WHERE window_start < :window_start")


@functools.lru_cache(maxsize=64)  # derived once per token key: the keys are few
def _ip_key(token_key: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=IP_KEY_INFO).derive(token_key)


def client_ip_hmac(keys: TokenKeys, client_ip: str) -> str:
    """``"<key id>:<hex HMAC>"`` of what the limits count for ``client_ip``; ``InvalidInput`` for no IP."""
    digest = hmac.new(_ip_key(keys.current), limit_subject(client_ip).encode("ascii"), hashlib.sha256)
    return f"{keys.current_id}:{digest.hexdigest()}"


def take(connection: Connection, counters: Sequence[Counter], *, now: datetime, **logged: str) -> None:
    """Take one unit from each counter in this window, or ``RateLimited`` naming the first full one.

    ``logged`` goes into the refusal's log line (a user or tenant: never an address or an IP).
    """
    if not counters:
        return
    # In the order of their keys, so that two calls sharing two counters never wait for each other; all
    # sent at once, with one wait for the answers (infra.db.pipeline).
    ordered = sorted(counters, key=lambda counter: counter.key)
    start = window_start(now)
    asked = [{"counter": c.key, "window_start": start, "allowance": c.quota.count} for c in ordered]
    pending = [execute_deferred(connection, TAKE, params, answer=True) for params in asked[:-1]]
    last = execute_read(connection, TAKE, asked[-1])  # the one wait: the deferred answers come with it
    answers = [*(p.all() for p in pending), last]
    taken = {counter.key for counter, rows in zip(ordered, answers, strict=True) if rows}
    reached = first_full([(c, 0 if c.key in taken else c.quota.count) for c in counters], now=now)
    if reached is not None:
        raise _refusal(reached, logged)


def _refusal(reached: LimitReached, logged: dict[str, str]) -> RateLimited:
    log_event(log, "limit reached", quota=reached.quota.name, retry_at=reached.retry_at, **logged)
    return RateLimited(_WORDS[reached.quota.name].format(retry_at=reached.retry_at.isoformat()),
                       retry_at=reached.retry_at, quota=reached.quota)


# What each refusal says: which limit, never whose address or IP.
_WORDS = {
    "per-address": "too many emails to this address within the hour; retry after {retry_at}",
    "per-address-ip": "too many emails to this address from this client IP within the hour; retry after {retry_at}",
    "per-user-ip": "too many requests for this user from this client IP within the hour; retry after {retry_at}",
    "per-ip": "too many emails requested from this client IP within the hour; retry after {retry_at}",
    "verify-ip": "too many checks from this client IP within the hour; retry after {retry_at}",
}


def send_admission(keys: TokenKeys, limits_of: Callable[[], tuple[SendLimits, int]], *, flow: str, tenant: str,
                   scoped_user_id: str, address_hash: str, client_ip: str | None) -> Admit:
    """What a create checks before its decision is appended: an email it queues takes a unit of each counter.

    ``limits_of`` gives the limits and the flow's hourly limit per user, the
    tenant's (read in the same transaction, ``infra.services.tenants.TenantRules``)
    by the time the decision is made. ``address_hash`` is the recipient's
    index hash (``infra.services.address_index.address_hmac``). ``InvalidInput``
    now, before any database work, for a ``client_ip`` that is no IP address.
    """
    ip_hash = None if client_ip is None else client_ip_hmac(keys, client_ip)

    def admit(connection: Connection, decision: Any, now: datetime) -> None:
        if isinstance(decision, Decision) and decision.emails:
            limits, hourly_limit = limits_of()
            counters = send_counters(limits, flow=flow, hourly_limit=hourly_limit, tenant=tenant,
                                     scoped_user_id=scoped_user_id, address_hash=address_hash, ip_hash=ip_hash)
            take(connection, counters, now=now, user_id=scoped_user_id)

    return admit


def verify_admission(keys: TokenKeys, limits: SendLimits, *, tenant: str, client_ip: str | None) -> Admit | None:
    """What a verify with ``client_ip`` checks before its decision is appended: every check takes a unit.

    Taken whatever the check finds, so a refusal tells nothing of whether the
    code was right. None without an IP; ``InvalidInput`` now for a bad one.
    """
    if client_ip is None:
        return None
    counters = verify_counters(limits, tenant=tenant, ip_hash=client_ip_hmac(keys, client_ip))

    def admit(connection: Connection, _decision: Any, now: datetime) -> None:
        take(connection, counters, now=now, tenant=tenant)

    return admit


def delete_past_windows(ctx: ServiceContext) -> int:
    """Delete the counters of windows that have ended (nothing reads them any more); how many rows.

    Run by ``serve`` beside the closed counts, so a keyed hash of an address
    or an IP stays at most a window and a pass past its hour.
    """
    with ctx.engine.begin() as connection:
        return connection.execute(DELETE_PAST, {"window_start": window_start(ctx.clock.now())}).rowcount
