"""Fixtures the delivery tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.smtp_relay import Relay, start_relay


@pytest.fixture
def relay() -> Iterator[Relay]:
    """An aiosmtpd relay in this process; ``relay.controller`` is its server, for tests that look at sessions."""
    relay = Relay()
    controller = start_relay(relay)
    relay.controller = controller  # type: ignore[attr-defined]
    yield relay
    controller.stop()
