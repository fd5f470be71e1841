"""Sharing an API process between callers: request rates per key and per tenant, and per-tenant turns.

Once a request's key is known (and before its work starts, so before any
write), ``Fairness.admitted``:

1. takes a token from the key's bucket and from its tenant's
   (``domain.buckets``); either empty, the request is refused at once with
   ``RateLimited`` naming the rate (429 with Retry-After and the RateLimit
   headers), and neither bucket is charged for it;
2. waits for one of the tenant's turns: at most ``tenant_in_flight`` of a
   tenant's requests run at once in this process while it is alone there,
   and ``shared_in_flight`` while another tenant is active (``turns_of``:
   a tenant is active while a request of its holds or waits for a turn,
   and for ``SHARING_WINDOW`` after one began). The turns are a share of
   the cores, not only of the threads: another tenant's request runs beside
   a flood's requests in flight, so a flood keeps few of them while anyone
   else is served, and all of them when nobody is. A request over the cap
   waits here, on the event loop, holding neither a request thread nor a
   database connection; after ``in_flight_wait`` it is refused with
   ``TenantBusy`` (429, Retry-After).

State lives in the process: with several API processes (``serve
--processes``) each keeps its own, so a caller may make up to that many
times the configured rate (docs/operations.md, "Fairness between
tenants"). Everything here runs on the event loop's one thread, so it
needs no lock.

The ``metrics`` scope (Prometheus, readiness probes) is held to its key's
rate only: a scrape during a tenant's flood is when an operator needs it.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import AsyncIterator
from datetime import timedelta

import anyio
from attrs import Factory, define

from domain.buckets import Bucket, Rate, is_full, take
from domain.clients import Caller
from domain.fairness import SHARING_WINDOW, FairnessPolicy, turns_of
from infra.clock import Clock
from infra.errors import RateLimited

# Buckets that have refilled are dropped (a full bucket is what a missing one
# stands for) once there are this many: only valid keys get one, so this is a
# bound on memory, not a limit anyone meets.
KEPT_BUCKETS = 10_000
# A tenant's turn comes back within a request's time, a few milliseconds.
BUSY_RETRY_AFTER = timedelta(seconds=1)


class TenantBusy(RateLimited):
    """Too many of this tenant's requests are in progress; try again shortly."""

    problem_type = "tenant-busy"
    problem_code = "tenant_busy"


@define
class _Turns:
    """One tenant's turns in this process: requests running, requests holding or waiting, the last one's start."""

    running: int = 0
    users: int = 0
    last_began: float = float("-inf")  # on the event loop's clock
    waiting: deque[anyio.Event] = Factory(deque)  # its requests waiting for a turn, first come first


class Fairness:
    """The rates and turns of one API process (see the module docstring); ``policy`` None limits nothing."""

    def __init__(self, policy: FairnessPolicy | None, clock: Clock) -> None:
        self.policy, self.clock = policy, clock
        self._key_buckets: dict[str, Bucket] = {}
        self._tenant_buckets: dict[str, Bucket] = {}
        self._turns: dict[str, _Turns] = {}

    def holding(self, tenant: str) -> int:
        """How many of ``tenant``'s requests hold or wait for a turn in this process now."""
        turns = self._turns.get(tenant)
        return 0 if turns is None else turns.users

    @contextlib.asynccontextmanager
    async def admitted(self, caller: Caller, *, tenant_wide: bool = True) -> AsyncIterator[None]:
        """Within the key's (and, ``tenant_wide``, the tenant's) rate and in one of the tenant's turns;
        ``RateLimited`` or ``TenantBusy`` otherwise."""
        if self.policy is None:
            yield
            return
        self._charge(caller.key_id, caller.tenant if tenant_wide else None)
        if not tenant_wide:
            yield
            return
        async with self._turn(caller.tenant, self.policy):
            yield

    def _charge(self, key_id: str, tenant: str | None) -> None:
        assert self.policy is not None
        now = self.clock.now()
        charges = [(self._key_buckets, key_id, self.policy.key_rate, "this API key")]
        if tenant is not None:
            charges.append((self._tenant_buckets, tenant, self.policy.tenant_rate, "this tenant's keys"))
        taken = [(buckets, name, rate, whose, take(buckets.get(name), rate, now))
                 for buckets, name, rate, whose in charges]
        for _, _, rate, whose, result in taken:
            if not result.allowed:  # refused: no bucket is charged for a request that does nothing
                raise RateLimited(f"{whose} made more than {_rate_text(rate)} in this API process; retry after "
                                  "Retry-After seconds", retry_at=result.retry_at, quota=rate.quota)
        for buckets, name, rate, _, result in taken:
            buckets[name] = result.bucket
            if len(buckets) > KEPT_BUCKETS:
                for full_name in [n for n, b in buckets.items() if is_full(b, rate, now)]:
                    del buckets[full_name]

    @contextlib.asynccontextmanager
    async def _turn(self, tenant: str, policy: FairnessPolicy) -> AsyncIterator[None]:
        now = anyio.current_time()
        turns = self._turns.setdefault(tenant, _Turns())
        turns.users += 1
        turns.last_began = now
        deadline = now + policy.in_flight_wait.total_seconds()
        try:
            while turns.running >= (allowed := turns_of(policy, others_active=self._others_active(tenant, now))):
                if now >= deadline:
                    raise TenantBusy(f"{allowed} of this tenant's requests are in progress in this API process; "
                                     "retry after Retry-After seconds", retry_at=self.clock.now() + BUSY_RETRY_AFTER)
                # Woken when a turn of this tenant's is given back (the first waiter only), and at least once
                # a window: another tenant going quiet gives this one its other turns without a turn given back.
                given_back = anyio.Event()
                turns.waiting.append(given_back)
                try:
                    with anyio.move_on_after(min(deadline - now, SHARING_WINDOW.total_seconds())):
                        await given_back.wait()
                finally:
                    if given_back in turns.waiting:
                        turns.waiting.remove(given_back)
                now = anyio.current_time()
            turns.running += 1
            try:
                yield
            finally:
                turns.running -= 1
                if turns.waiting:
                    turns.waiting.popleft().set()
        finally:
            turns.users -= 1
            self._forget_quiet_tenants(anyio.current_time())

    def _others_active(self, tenant: str, now: float) -> bool:
        return any(other != tenant and _active(turns, now) for other, turns in self._turns.items())

    def _forget_quiet_tenants(self, now: float) -> None:
        for tenant in [t for t, turns in self._turns.items() if not _active(turns, now)]:
            del self._turns[tenant]


def _active(turns: _Turns, now: float) -> bool:
    """Whether a tenant holds or waits for a turn, or began a request within the sharing window."""
    return turns.users > 0 or now - turns.last_began < SHARING_WINDOW.total_seconds()


def _rate_text(rate: Rate) -> str:
    return f"{rate.per_second:g} requests a second (bursts of {rate.burst})"
