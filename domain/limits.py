"""Limits: how many of a thing a caller may do in a window, and what a refusal tells them.

A ``Quota`` names one limit (``per-user``, ``per-address``, ``per-key`` ...),
its allowance and its window. Every limit refuses the same way: the services
raise ``RateLimited`` carrying the quota that refused, and the HTTP edge turns
it into a 429 with ``Retry-After`` and the IETF ``RateLimit`` /
``RateLimit-Policy`` headers (draft-ietf-httpapi-ratelimit-headers), so a
client can tell which limit it met without parsing English.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from attrs import frozen

from domain.errors import ConfigError

# A policy name is a Structured Field token-like word: it goes into a header as a quoted string.
QUOTA_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")


@frozen
class Quota:
    """At most ``count`` in every ``window``; ``name`` says which limit this is."""

    name: str
    count: int
    window: timedelta

    def __attrs_post_init__(self) -> None:
        if not QUOTA_NAME.fullmatch(self.name):
            raise ConfigError(f"a quota's name is 1-32 of a-z, 0-9 and '-', starting with a letter; got {self.name!r}")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ConfigError(f"quota {self.name}: the count must be a whole number of at least 1, got {self.count!r}")
        if not isinstance(self.window, timedelta) or self.window <= timedelta(0):
            raise ConfigError(f"quota {self.name}: the window must be a positive duration, got {self.window!r}")

    @property
    def window_seconds(self) -> int:
        return max(1, int(self.window.total_seconds()))


def window_of(moment: datetime) -> datetime:
    """The start of the counting window ``moment`` falls in: its hour of the clock (UTC), which a reviewer can name.

    Floods (``domain.counting``) and the send limits (``domain.send_limits``) count in the same windows.
    """
    return moment.replace(minute=0, second=0, microsecond=0)
