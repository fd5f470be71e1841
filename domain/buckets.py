"""Token buckets: a rate with a burst, as pure functions over a frozen bucket (time passed in).

A ``Rate`` allows ``per_second`` requests a second on average and up to
``burst`` at once. A ``Bucket`` holds the tokens left and when it was last
counted; ``take`` refills it for the time that passed and takes one token,
or says when the next one will be there. Nothing here reads a clock, so the
rules are tested with given times (tests/unit/test_buckets.py), and the HTTP
edge (``infra.http.fairness``) keeps one bucket per API key and per tenant.

A clock that goes backwards (a wall clock stepped by NTP) refills nothing
rather than taking tokens back or minting them.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from attrs import frozen

from domain.errors import ConfigError
from domain.limits import Quota

# Float tokens gather rounding error: a bucket refilled for exactly the wait
# that ``take`` named may hold 0.9999999999999999. Within this of a token is a token.
ROUNDING = 1e-9


@frozen
class Rate:
    """``per_second`` requests a second on average, up to ``burst`` at once; ``name`` names it in a 429."""

    name: str
    per_second: float
    burst: int

    def __attrs_post_init__(self) -> None:
        if isinstance(self.per_second, bool) or not isinstance(self.per_second, int | float) \
                or not math.isfinite(self.per_second) or self.per_second <= 0:
            raise ConfigError(f"rate {self.name}: requests a second must be a positive number, got {self.per_second!r}")
        if isinstance(self.burst, bool) or not isinstance(self.burst, int) or self.burst < 1:
            raise ConfigError(f"rate {self.name}: the burst must be a whole number of at least 1, got {self.burst!r}")

    @property
    def quota(self) -> Quota:
        """The rate as the ``RateLimit-Policy`` header states it: ``burst`` in the time the bucket takes to fill."""
        return Quota(self.name, self.burst, timedelta(seconds=max(1, math.ceil(self.burst / self.per_second))))


@frozen
class Bucket:
    """``tokens`` left at ``counted_at``."""

    tokens: float
    counted_at: datetime


@frozen
class Taken:
    """What ``take`` decided: ``allowed`` or not, the bucket after, and when a token is next there."""

    allowed: bool
    bucket: Bucket
    retry_at: datetime  # when a refused request may try again; ``now`` when allowed

    @property
    def remaining(self) -> int:
        """Whole tokens left, for the ``RateLimit`` header."""
        return int(self.bucket.tokens)


def full(rate: Rate, now: datetime) -> Bucket:
    """A bucket nobody has taken from: a first request may spend the whole burst."""
    return Bucket(float(rate.burst), now)


def refilled(bucket: Bucket, rate: Rate, now: datetime) -> Bucket:
    """``bucket`` as of ``now``: tokens added at ``rate.per_second``, never above the burst."""
    elapsed = max(0.0, (now - bucket.counted_at).total_seconds())
    return Bucket(min(float(rate.burst), bucket.tokens + elapsed * rate.per_second), max(now, bucket.counted_at))


def take(bucket: Bucket | None, rate: Rate, now: datetime) -> Taken:
    """Take one token from ``bucket`` (None: a full one) at ``now``; refused when less than one is left."""
    current = refilled(bucket, rate, now) if bucket is not None else full(rate, now)
    if current.tokens >= 1 - ROUNDING:
        return Taken(True, Bucket(max(0.0, current.tokens - 1), current.counted_at), now)
    wait_us = math.ceil((1 - current.tokens) / rate.per_second * 1_000_000)  # never a microsecond early
    return Taken(False, current, current.counted_at + timedelta(microseconds=wait_us))


def is_full(bucket: Bucket, rate: Rate, now: datetime) -> bool:
    """Whether ``bucket`` has refilled to its burst by ``now``: it may be forgotten, as ``full`` makes it anew."""
    return refilled(bucket, rate, now).tokens >= rate.burst - ROUNDING
