"""A window of provider calls in flight, run by one asyncio event loop in the worker's thread.

The loop claims only as many messages as the window has free places, so
every claimed message starts its provider call at once: right after the
group's fresh read (``prepare_all``), with no await in between. Groups are
kept small enough for their read to take at most 3/4 of ``FRESH_WITHIN``
(100 ms); a call that still cannot start within ``FRESH_WITHIN`` of the read
(a busy machine) reads its message again first. Database calls are
synchronous and run in a thread (``asyncio.to_thread``) so that sends keep
completing meanwhile; the loop's own run one at a time.

Outcomes are recorded in groups, fenced by lease token. A provider that
drops repeats (``mailer.idempotent``) frees a place as soon as its call
returns, and its outcomes wait for the next group, at most ``RECORD_WITHIN``.
Otherwise (SMTP) a place frees only once its outcome is recorded, so a
crash repeats at most a window's worth of sends.

While the circuit breaker is open nothing is claimed, and messages claimed
before it opened are given back unsent without counting their attempt. A
database error leaves the window's unstarted claims and unrecorded outcomes
where they are; the next step takes them up again, fenced by lease token,
instead of leaving them to wait out their leases.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from uuid import UUID

from sqlalchemy import Engine

from domain.delivery import RECORD_WITHIN
from infra.db.reading import reading
from infra.delivery.breaker import Breaker
from infra.delivery.fresh import Prepared, prepare_all
from infra.delivery.leases import Claim, still_held
from infra.delivery.providers import Mailer, OutboundEmail, ProviderReceipt, SendFailed
from domain.email import SendAttemptFailed
from domain.webhooks import WEBHOOK_FLOW
from infra.delivery.send import Attempt, Sent, after_sending, record, released, without_sending
from infra.delivery.webhook_calls import WebhookClient, endpoint_of
from infra.errors import DatabaseUnavailable
from infra.services.unit_of_work import ServiceContext


# No send may rely on a fresh read older than this when its provider call starts.
FRESH_WITHIN = 0.1
# The share of FRESH_WITHIN a group's read may take; the rest is for starting its calls.
READ_SHARE = 0.75


class Window:
    """Up to ``size`` provider calls in flight for one lease owner."""

    def __init__(
        self, ctx: ServiceContext, mailer: Mailer, *, owner: str, sender: str, size: int,
        claim: Callable[[int], list[Claim]], breaker: Breaker, jitter: Callable[[], float] = random.random,
        stopping: Callable[[], bool] = lambda: False, outcomes: Engine | None = None,
        endpoint_breakers: dict[str, Breaker] | None = None,
    ) -> None:
        self.ctx, self.mailer, self.owner, self.sender, self.size = ctx, mailer, owner, sender, size
        self.outcomes = outcomes or ctx.engine  # what the outcomes are recorded through (see ``Worker``)
        self.claim, self.breaker, self.jitter, self.stopping = claim, breaker, jitter, stopping
        self.in_flight = 0
        # The most time between a fresh read's start and a provider call it let
        # start, in seconds: never more than FRESH_WITHIN.
        self.stalest_read = 0.0
        self._read_cost = 0.0  # seconds per message of a group's fresh read
        self.rereads = 0  # messages read again because their group's read went stale before their call
        self._reread: asyncio.Lock | None = None  # one such read at a time, beside the loop's own
        self.tally: Counter[str] = Counter()
        self.states: dict[UUID, str] = {}  # message id -> state, for callers that asked for given claims
        self._unstarted: list[Claim] = []  # claimed, not sent: a database error cut in
        self._stranded: list[Claim] = []  # the same, found by a send whose second read met the error
        self._unrecorded: list[Sent] = []
        self._sends: set[asyncio.Task[None]] = set()
        self._changed: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._send_async = getattr(mailer, "send_async", None)
        # Webhook deliveries share the window; each endpoint has a circuit breaker of its own.
        self.webhooks = WebhookClient()
        self.endpoint_breakers = {} if endpoint_breakers is None else endpoint_breakers
        self._executor = None if self._send_async else ThreadPoolExecutor(size, thread_name_prefix="send")

    @property
    def idle(self) -> bool:
        """Nothing in flight, nothing left to record or to start."""
        return not (self.in_flight or self._unrecorded or self._unstarted or self._stranded)

    @property
    def room(self) -> int:
        held = 0 if self.mailer.idempotent else len(self._unrecorded)
        return max(self.size - self.in_flight - held, 0)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    # -- one step of the loop ------------------------------------------------

    async def step(self, *, stopping: bool, limit: int | None = None) -> int:
        """Record what is due, fill the free places and start their sends; the number of messages taken up."""
        await self._record(everything=stopping or not self.mailer.idempotent)
        if self._stranded:
            self._unstarted, self._stranded = [*self._unstarted, *self._stranded], []
        claims = await self._take_back() if self._unstarted else []
        if not claims and not stopping:
            probing = self.breaker.state == "open"  # then the allowance is one message, the probe
            wanted = self.breaker.allowance(min(self.room, limit or self.size, self._fresh_group))
            claims = await asyncio.to_thread(self.claim, wanted) if wanted else []
            if probing and claims:
                self.breaker.probe_claimed()
        if claims:
            await self._start(claims, stopping=stopping)
        if not self.in_flight:
            await self._record(everything=True)
        await self._record_transitions()
        return len(claims)

    async def deliver(self, claims: list[Claim]) -> None:
        """Send ``claims`` (claimed by the caller) and record every outcome."""
        self.bind()
        await self._start(claims, stopping=False)
        while self.in_flight:
            await self.wait(RECORD_WITHIN.total_seconds())
        await self._record(everything=True)
        await self._record_transitions()
        await self.webhooks.aclose()

    async def _start(self, claims: list[Claim], *, stopping: bool) -> None:
        self._unstarted = claims
        read_at, prepared = time.monotonic(), []
        if not stopping:
            prepared = await asyncio.to_thread(self._prepare, claims)
            self._note_read_cost(len(claims), time.monotonic() - read_at)
        self._unstarted = []
        stopping = stopping or self.stopping()
        if stopping or self.breaker.state == "open":
            # Claimed before the worker stopped or the provider went down: unsent, not an attempt when down.
            self._unrecorded += [released(self.ctx, claim, self.owner, attempt_returned=not stopping)
                                 for claim in claims]
            return
        started = 0
        for claim, fresh in zip(claims, prepared, strict=True):
            early = (without_sending(self.ctx, claim, fresh, idempotent=self._idempotent(claim))
                     or self._endpoint_down(claim, fresh))
            if early is not None:
                self._unrecorded.append(Sent(claim, fresh, early, self.ctx.clock.now()))
                continue
            self.in_flight += 1
            task = asyncio.create_task(self._send(claim, fresh, read_at))
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)
            started += 1
        if not started:
            self.breaker.probe_not_sent()

    def _endpoint_breaker(self, endpoint_id: str) -> Breaker:
        if endpoint_id not in self.endpoint_breakers:
            self.endpoint_breakers[endpoint_id] = Breaker(self.ctx, f"webhook:{endpoint_id}", owner=self.owner,
                                                          policy=self.breaker.policy)
        return self.endpoint_breakers[endpoint_id]

    def _breaker_of(self, claim: Claim) -> Breaker:
        """The provider's breaker for an email, the endpoint's for a webhook delivery."""
        return self._endpoint_breaker(endpoint_of(claim)) if claim.row.flow == WEBHOOK_FLOW else self.breaker

    def _idempotent(self, claim: Claim) -> bool:
        """Whether a repeat of this message is dropped at the other end: by the provider for an email (its
        ``idempotent``), by the receiver for a webhook (the specification has it de-duplicate by webhook-id)."""
        return claim.row.flow == WEBHOOK_FLOW or self.mailer.idempotent

    def _endpoint_down(self, claim: Claim, prepared: Prepared) -> Attempt | None:
        """Not calling an endpoint whose circuit is open (one call probes it when due): retry at the probe."""
        if prepared.webhook is None:
            return None
        breaker = self._endpoint_breaker(prepared.webhook.endpoint_id)
        if breaker.state == "closed":
            return None
        if breaker.state == "open" and breaker.allowance(1):
            breaker.probe_claimed()
            return None
        now = self.ctx.clock.now()
        probe_at = breaker.circuit.probe_at
        retry_at = probe_at if probe_at is not None and probe_at > now else now + self.ctx.delivery_policy.backoff_base
        failed = SendAttemptFailed(claim.row.message_id, claim.lease_token, claim.row.attempt_count, now,
                                   "endpoint circuit open: not called", True, retry_at)
        return Attempt([failed], "endpoint_down", "pending", error=failed.error)

    @property
    def _fresh_group(self) -> int:
        """The most messages to claim at once: their fresh read must take at most ``READ_SHARE`` of ``FRESH_WITHIN``."""
        if not self._read_cost:
            return self.size
        return max(1, int(FRESH_WITHIN * READ_SHARE / self._read_cost))

    def _note_read_cost(self, messages: int, seconds: float) -> None:
        """Follow what a fresh read costs per message (a moving average), to size the next groups."""
        cost = seconds / max(messages, 1)
        self._read_cost = cost if not self._read_cost else 0.8 * self._read_cost + 0.2 * cost

    def _prepare(self, claims: Sequence[Claim]) -> list[Prepared]:
        # Each statement of the read sees its own snapshot either way,
        # and no transaction is held across the provider calls that follow.
        with reading(self.ctx.engine) as connection:
            return prepare_all(self.ctx, claims, sender=self.sender, connection=connection)

    async def _take_back(self) -> list[Claim]:
        """The unstarted claims that still hold their lease: a message claimed by another worker since is not ours."""
        # Kept until the check answers: a database still away leaves them to the next step. (Emptied first,
        # a failed check lost them, leased to this worker until their leases ran out.)
        self._unstarted = await asyncio.to_thread(self._still_held, self._unstarted)
        return self._unstarted

    def _still_held(self, claims: list[Claim]) -> list[Claim]:
        with reading(self.ctx.engine) as connection:
            return still_held(connection, claims)

    # -- sends -----------------------------------------------------------------

    async def _send(self, claim: Claim, prepared: Prepared, read_at: float) -> None:
        try:
            answer = await self._call(prepared, read_at)
            while answer is None:
                # The read went stale before the call could start (a busy machine): read this message again.
                read_at = time.monotonic()
                self.rereads += 1
                assert self._reread is not None
                try:
                    async with self._reread:
                        [prepared] = await asyncio.to_thread(self._prepare, [claim])
                except DatabaseUnavailable:
                    # Unsent: taken up again with the window's other unstarted claims once the database is
                    # back (a failover), rather than left to wait out its lease.
                    self._stranded.append(claim)
                    return
                early = without_sending(self.ctx, claim, prepared, idempotent=self._idempotent(claim))
                if early is not None:
                    self._unrecorded.append(Sent(claim, prepared, early, self.ctx.clock.now()))
                    self._breaker_of(claim).probe_not_sent()
                    return
                answer = await self._call(prepared, read_at)
            self._breaker_of(claim).observe(claim.row.message_id, answer if isinstance(answer, SendFailed) else None)
            result = after_sending(self.ctx, claim, prepared, answer, self.jitter)
            self._unrecorded.append(Sent(claim, prepared, result, self.ctx.clock.now()))
        finally:
            self.in_flight -= 1
            self.wake()

    async def _call(self, prepared: Prepared, read_at: float) -> ProviderReceipt | SendFailed | None:
        """The provider's answer; None, without calling it, when the read is older than ``FRESH_WITHIN``."""
        try:
            if prepared.webhook is not None:
                return await self.webhooks.send(prepared.webhook) if self._fresh(read_at) else None
            assert prepared.email is not None
            if self._send_async is None:
                loop = asyncio.get_running_loop()
                return await loop.run_in_executor(self._executor, self._send_if_fresh, prepared.email, read_at)
            if not self._fresh(read_at):
                return None
            return await self._send_async(prepared.email)
        except SendFailed as error:
            return error

    def _send_if_fresh(self, email: OutboundEmail, read_at: float) -> ProviderReceipt | None:
        """``mailer.send`` on a thread of the pool, unless the read went stale while the thread was starting."""
        return self.mailer.send(email) if self._fresh(read_at) else None

    def _fresh(self, read_at: float) -> bool:
        age = time.monotonic() - read_at
        if age > FRESH_WITHIN:
            return False
        self.stalest_read = max(self.stalest_read, age)
        return True

    def wake(self) -> None:
        if self._changed is not None:
            self._changed.set()

    async def wait(self, seconds: float) -> None:
        """Until a send completes, ``wake()`` is called, or ``seconds`` pass."""
        if self._changed is None:
            self._changed = asyncio.Event()
        try:
            await asyncio.wait_for(self._changed.wait(), timeout=seconds)
        except TimeoutError:
            pass
        self._changed.clear()

    def bind(self) -> None:
        """Make the wake-up event on the running loop, for ``wake_threadsafe`` from other threads."""
        self._changed = asyncio.Event()
        self._reread = asyncio.Lock()
        self._loop = asyncio.get_running_loop()

    def wake_threadsafe(self) -> None:
        if self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self.wake)
            except RuntimeError:  # the loop has just finished
                pass

    # -- records ---------------------------------------------------------------

    async def _record(self, *, everything: bool) -> None:
        if not self._unrecorded:
            return
        oldest = self._unrecorded[0].handled_at
        if not everything and self.ctx.clock.now() - oldest < RECORD_WITHIN:
            return
        group = list(self._unrecorded)
        states = await asyncio.to_thread(record, self.outcomes, group, self.owner)
        del self._unrecorded[: len(group)]
        self.states.update(states)
        self.tally.update(states.values())

    async def _record_transitions(self) -> None:
        for breaker in [self.breaker, *self.endpoint_breakers.values()]:
            if breaker.pending:
                await asyncio.to_thread(breaker.record)


def deliver_batch(
    ctx: ServiceContext, claims: Sequence[Claim], mailer: Mailer, *, owner: str, sender: str,
    jitter: Callable[[], float] = random.random,
) -> list[str]:
    """Send messages already claimed, all at once, and record them; the state each ends in, in claim order."""
    window = Window(ctx, mailer, owner=owner, sender=sender, size=max(len(claims), 1), claim=lambda limit: [],
                    breaker=Breaker(ctx, mailer.name, owner=owner), jitter=jitter)
    try:
        asyncio.run(window.deliver(list(claims)))
    finally:
        window.close()
    return [window.states[claim.row.message_id] for claim in claims]


def deliver(
    ctx: ServiceContext, claim: Claim, mailer: Mailer, *, owner: str, sender: str,
    jitter: Callable[[], float] = random.random,
) -> str:
    """Send one claimed message and record what happened; returns the message's new state."""
    [state] = deliver_batch(ctx, [claim], mailer, owner=owner, sender=sender, jitter=jitter)
    return state
