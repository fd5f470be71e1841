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

# A tenant counts as active in a process for this long after its last request began: a client paced at
# a few requests a second is active all along, so a flood's turns stay shared between its requests.
SHARING_WINDOW = timedelta(seconds=1)

KEY_RATE_NAME = "per-key"
TENANT_RATE_NAME = "per-tenant"


@frozen
class FairnessPolicy:
    """Rates (requests a second, with a burst) per API key and per tenant, and how many requests of one
    tenant run at once in a process (alone, and while another tenant is active there), with how long one
    more waits for its turn."""

    key_per_second: int = 50
    key_burst: int = 100
    tenant_per_second: int = 100
    tenant_burst: int = 200
    tenant_in_flight: int = 2
    shared_in_flight: int = 1
    in_flight_wait: timedelta = timedelta(seconds=2)

    def __attrs_post_init__(self) -> None:
        self.key_rate, self.tenant_rate  # noqa: B018 - a Rate refuses what it cannot honour
        if isinstance(self.tenant_in_flight, bool) or not isinstance(self.tenant_in_flight, int) \
                or self.tenant_in_flight < 1:
            raise ConfigError(f"FairnessPolicy.tenant_in_flight must be at least 1, got {self.tenant_in_flight!r}")
        if isinstance(self.shared_in_flight, bool) or not isinstance(self.shared_in_flight, int) \
                or not 1 <= self.shared_in_flight <= self.tenant_in_flight:
            raise ConfigError("FairnessPolicy.shared_in_flight must be at least 1 and at most tenant_in_flight "
                              f"({self.tenant_in_flight}), got {self.shared_in_flight!r}")
        if not isinstance(self.in_flight_wait, timedelta) or self.in_flight_wait < timedelta(0):
            raise ConfigError(f"FairnessPolicy.in_flight_wait must not be negative, got {self.in_flight_wait!r}")

    @property
    def key_rate(self) -> Rate:
        return Rate(KEY_RATE_NAME, self.key_per_second, self.key_burst)

    @property
    def tenant_rate(self) -> Rate:
        return Rate(TENANT_RATE_NAME, self.tenant_per_second, self.tenant_burst)


def turns_of(policy: FairnessPolicy, *, others_active: bool) -> int:
    """How many of a tenant's requests may run at once in a process: all its turns while it is alone there,
    its shared turns while another tenant is active (the two cores are shared by running requests, so a
    flood's requests in flight are what another tenant's request waits behind)."""
    return policy.shared_in_flight if others_active else policy.tenant_in_flight
