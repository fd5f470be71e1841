"""The stable tag and schema version of every event class.

Tags are names chosen once and kept forever: stored data must not depend on
where a class lives in the code. Changing an event's shape means bumping its
version here and registering an upcaster in ``infra.upcasters``.
"""

from __future__ import annotations

from domain import email

# tag -> (class, current schema version)
EVENT_TYPES: dict[str, tuple[type, int]] = {
    "EmailQueued": (email.EmailQueued, 1),
    "LeaseClaimed": (email.LeaseClaimed, 1),
    "LeaseExpired": (email.LeaseExpired, 1),
    "SendAttemptFailed": (email.SendAttemptFailed, 1),
    "ProviderAccepted": (email.ProviderAccepted, 1),
    "DeliverySkipped": (email.DeliverySkipped, 1),
    "DeliveryAbandoned": (email.DeliveryAbandoned, 1),
}
