"""Which providers are down now, as the workers that saw it recorded (the ``provider:<name>`` streams).

A worker whose circuit opens appends ``ProviderOutageBegan`` to its
provider's stream and ``ProviderOutageEnded`` when a probe is answered
again, so a stream whose latest event is a beginning names an outage still
going on. ``outbox stuck`` and ``explain`` tell it rather than blaming the
workers for mail that waits (``projections.findings.outage_going_on``): the
workers are running, holding mail back and probing. (A worker killed while its circuit was open leaves a
beginning that no end follows; the time it names shows how old it is.)
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Connection, text

from domain.outage import ProviderOutageBegan, provider_stream
from infra.eventlog.codec import default_codec

# The latest event of each named stream, by the (stream_id, stream_version) key: one probe per provider.
LATEST = text("""
    SELECT DISTINCT ON (stream_id) event_type, schema_version, payload
      FROM events
     WHERE stream_id = ANY(:streams)
     ORDER BY stream_id, stream_version DESC
""")


def open_outages(connection: Connection, providers: Iterable[str]) -> list[ProviderOutageBegan]:
    """The outages of ``providers`` that began and have not ended, by provider name."""
    rows = connection.execute(LATEST, {"streams": [provider_stream(name) for name in providers]})
    codec = default_codec()
    latest = [codec.decode(row.event_type, row.schema_version, row.payload) for row in rows]
    return sorted((e for e in latest if isinstance(e, ProviderOutageBegan)), key=lambda e: e.provider)
