"""Upcasters: (tag, version) -> function turning that payload into version + 1.

Empty until an event's shape changes; the mechanism is tested with a made-up
event type in tests/unit/test_serialization.py.
"""

from __future__ import annotations

from infra.serialization import Upcaster

UPCASTERS: dict[tuple[str, int], Upcaster] = {}
