"""How the API shares itself between callers: request rates per key and per tenant, and in-flight caps.

The numbers come from settings (``infra.config.settings``, where each
default's reason is written); the HTTP edge (``infra.http.fairness``) holds
the state, one API process at a time.
"""

from __future__ import annotations

from datetime import timedelta

from attrs import frozen

from domain.buckets import Rate
from domain.errors import ConfigError

KEY_RATE_NAME = "per-key"
TENANT_RATE_NAME = "per-tenant"


@frozen
class FairnessPolicy:
    """Rates (requests a second, with a burst) per API key and per tenant, and how many requests of one
    tenant run at once in a process, with how long one more waits for its turn."""

    key_per_second: int = 50
    key_burst: int = 100
    tenant_per_second: int = 100
    tenant_burst: int = 200
    tenant_in_flight: int = 4
    in_flight_wait: timedelta = timedelta(seconds=2)

    def __attrs_post_init__(self) -> None:
        self.key_rate, self.tenant_rate  # noqa: B018 - a Rate refuses what it cannot honour
        if isinstance(self.tenant_in_flight, bool) or not isinstance(self.tenant_in_flight, int) \
                or self.tenant_in_flight < 1:
            raise ConfigError(f"FairnessPolicy.tenant_in_flight must be at least 1, got {self.tenant_in_flight!r}")
        if not isinstance(self.in_flight_wait, timedelta) or self.in_flight_wait < timedelta(0):
            raise ConfigError(f"FairnessPolicy.in_flight_wait must not be negative, got {self.in_flight_wait!r}")

    @property
    def key_rate(self) -> Rate:
        return Rate(KEY_RATE_NAME, self.key_per_second, self.key_burst)

    @property
    def tenant_rate(self) -> Rate:
        return Rate(TENANT_RATE_NAME, self.tenant_per_second, self.tenant_burst)
