"""Events of an email provider's outages, the ``provider:<name>`` stream.

A worker whose circuit breaker (``domain/circuit.py``) opens records that the
provider went down; when a probe gets an answer again, it records the
recovery. Reviewers then see why mail queued during the outage waited.
"""

from __future__ import annotations

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
