"""Limits beyond the user's own: what one address receives, and what one end user's IP may ask for.

The per-user hourly limit (``domain.request_rules``) lives on the user's
stream. It cannot stop a caller that varies the user id (one address, sixty
made-up users: sixty emails), and anyone can use it up for the user. So
every email a create queues also takes one unit from each of these counters,
all within the tenant and per window (an hour of the clock, UTC):

- ``per-address``: emails to one recipient address, whatever the user ids;
- with the end user's IP (``client_ip``, when the application passes it):
  ``per-user-ip``, the part of one user's hourly allowance one IP may use;
  ``per-address-ip``, the part of one address's allowance one IP may use;
  ``per-ip``, emails one IP may cause across all users.

A sub-allowance is smaller than the whole it is part of, so calls from one IP
never use up a user's or an address's allowance: the user, from anywhere
else, still gets their email. A verify with ``client_ip`` takes one unit of
``verify-ip`` (checks of codes and links one IP may make).

Counters are keyed by keyed hashes of the address and the IP, never by the
data itself; the services keep them (``infra.services.send_limits``). This
module only says which counters a call takes and what a full one answers.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from attrs import frozen

from domain.errors import ConfigError
from domain.limits import Quota, window_of

# A clock hour, as flood counts use (domain.limits.window_of): a reviewer
# can name it, and a counter row is one row per key and hour. At a window's
# edge a burst can take two windows' allowance within minutes; the defaults
# are small enough that twice them is still a handful.
WINDOW = timedelta(hours=1)


def _whole(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"SendLimits.{name} must be a whole number of at least 1, got {value!r}")


@frozen
class SendLimits:
    """How many emails and checks each counter allows per window (the defaults' reasons: docs/limits.md)."""

    per_address: int = 6
    per_address_per_ip: int = 3
    per_user_per_ip: int = 3
    per_ip: int = 20
    verifies_per_ip: int = 60

    def __attrs_post_init__(self) -> None:
        for name in ("per_address", "per_address_per_ip", "per_user_per_ip", "per_ip", "verifies_per_ip"):
            _whole(name, getattr(self, name))
        if self.per_address_per_ip >= self.per_address:
            raise ConfigError(
                f"SendLimits.per_address_per_ip ({self.per_address_per_ip}) must be smaller than per_address "
                f"({self.per_address}): else calls from one IP can use up an address's whole allowance"
            )

    def quota(self, name: str) -> Quota:
        """The quota called ``name`` (``per-address``, ``per-ip`` ...) in its window; see ``user_ip_quota``."""
        counts = {"per-address": self.per_address, "per-address-ip": self.per_address_per_ip,
                  "per-ip": self.per_ip, "verify-ip": self.verifies_per_ip}
        return Quota(name, counts[name], WINDOW)

    def user_ip_quota(self, hourly_limit: int) -> Quota:
        """What one IP may use of a user's ``hourly_limit``: ``per_user_per_ip``, held one below the limit.

        Held below rather than refused at start-up, so that a deployment that
        lowered its hourly limit keeps running. With an hourly limit of 1 there
        is nothing to split: one IP can then always use a user's allowance up.
        """
        return Quota("per-user-ip", max(1, min(self.per_user_per_ip, hourly_limit - 1)), WINDOW)


@frozen
class Counter:
    """One counter a call takes a unit from: the quota it is held to, and the key of its row (hashes only)."""

    quota: Quota
    key: str


def send_counters(
    limits: SendLimits, *, flow: str, hourly_limit: int, tenant: str, scoped_user_id: str, address_hash: str,
    ip_hash: str | None,
) -> tuple[Counter, ...]:
    """The counters an email queued by a create takes a unit from; the IP's own first, as they are its caller's.

    ``hourly_limit`` is the user's own limit in ``flow``, which one IP gets a part of.
    """
    per_address = Counter(limits.quota("per-address"), f"address {tenant} {address_hash}")
    if ip_hash is None:
        return (per_address,)
    return (
        Counter(limits.user_ip_quota(hourly_limit), f"user-ip {flow} {scoped_user_id} {ip_hash}"),
        Counter(limits.quota("per-address-ip"), f"address-ip {tenant} {address_hash} {ip_hash}"),
        Counter(limits.quota("per-ip"), f"ip {tenant} {ip_hash}"),
        per_address,
    )


def verify_counters(limits: SendLimits, *, tenant: str, ip_hash: str | None) -> tuple[Counter, ...]:
    """The counters a verify (a code or a link checked) takes a unit from: none without an IP."""
    return () if ip_hash is None else (Counter(limits.quota("verify-ip"), f"verify-ip {tenant} {ip_hash}"),)


@frozen
class LimitReached:
    """A counter is full: ``quota`` refused, and its window ends at ``retry_at``."""

    quota: Quota
    retry_at: datetime


def window_start(now: datetime) -> datetime:
    """The start of the window ``now`` counts in."""
    return window_of(now)


def first_full(counts: Iterable[tuple[Counter, int]], *, now: datetime) -> LimitReached | None:
    """The first counter whose count this window has reached its quota, or None when each has room.

    ``counts`` pairs each counter with its count in the window of ``now``
    (0 when it has none). A full counter empties when its window ends.
    """
    for counter, count in counts:
        if count >= counter.quota.count:
            return LimitReached(counter.quota, window_start(now) + WINDOW)
    return None
