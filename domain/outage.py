"""Events of an email provider's outages, the ``provider:<name>`` stream.

A worker whose circuit breaker (``domain/circuit.py``) opens records that the
provider went down; when a probe gets an answer again, it records the
recovery. Reviewers then see why mail queued during the outage waited.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from attrs import frozen


def provider_stream(provider: str) -> str:
    return f"provider:{provider}"


@frozen
class ProviderOutageBegan:
    provider: str
    worker: str  # the lease owner whose sends recognised it
    began_at: datetime
    failures: int  # different messages that failed in a row
    last_error: str | None


@frozen
class ProviderOutageEnded:
    provider: str
    worker: str
    ended_at: datetime
    began_at: datetime


def outage_left_open(events: Iterable[object]) -> ProviderOutageBegan | None:
    """The fold of a provider's stream: the outage its latest event began, or None when the latest ended one."""
    latest = None
    for event in events:
        latest = event if isinstance(event, ProviderOutageBegan | ProviderOutageEnded) else latest
    return latest if isinstance(latest, ProviderOutageBegan) else None


def end_of_outage_left_open(
    left_open: ProviderOutageBegan | None, *, worker: str, now: datetime
) -> list[ProviderOutageEnded]:
    """``ProviderOutageEnded`` when the log still says the provider is down but ``worker`` got an answer.

    The worker that saw an outage begin records its end when its probe is
    answered; if it was stopped first, the outage would stay open in the log
    for ever, and ``outbox stuck`` would blame it for mail that waits. A
    worker whose first send is answered ends it instead.
    """
    if left_open is None:
        return []
    return [ProviderOutageEnded(left_open.provider, worker, now, left_open.began_at)]
