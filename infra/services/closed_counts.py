"""Writing a flood's counts to the log once its hour has closed, whatever its victim does next.

A counted call (``domain.counting``) bumps a row of ``request_counts``; the
stream's next append writes the row as a ``RequestsCounted`` event. Left at
that, a user who never came back would leave their flood in the buffer, out
of the log a reviewer replays, and one who did would pay for writing it on
their next request; and the counts of a window that reached its ceiling of
events from floods wait for its end anyway (``domain.counting.counts_fit``).
``ClosedCountsWriter`` runs beside the API in ``serve``
and, every ``interval_seconds``, writes the rows of every window that has
closed, each stream in a transaction of its own under its lock
(``write_closed_counts``), so that a flood's count is in the log within that
interval of its hour's end. The same pass deletes the limits' counters of
hours gone by (``infra.services.send_limits.delete_past_windows``): no
decision reads them any more, and they hold keyed hashes of addresses and IPs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from sqlalchemy import text

from domain.limits import window_of
from infra.db.reading import reading
from infra.logs import error_line, log_event
from infra.services.send_limits import delete_past_windows
from infra.services.unit_of_work import ServiceContext, write_closed_counts

log = logging.getLogger("authledger.counts")

BATCH = 500  # streams listed per statement; a pass goes on until none is left
# The buffer holds a row per stream with a flood in progress or just over: a scan is cheap.
CLOSED_STREAMS = text("""
    SELECT DISTINCT stream_id FROM request_counts WHERE window_start < :window AND stream_id > :after
     ORDER BY stream_id LIMIT :limit
""")


def write_all_closed_counts(ctx: ServiceContext, metadata: Mapping[str, Any] | None = None) -> int:
    """Write the counts of every window closed by now, stream by stream; the ``RequestsCounted`` written."""
    window, after, written = window_of(ctx.clock.now()), "", 0
    while True:
        listed = {"window": window, "after": after, "limit": BATCH}
        # In autocommit: a rolled-back read would cost the pooled connection its prepared statements.
        with reading(ctx.engine) as connection:
            streams = connection.execute(CLOSED_STREAMS, listed).scalars().all()
        for stream_id in streams:
            written += write_closed_counts(ctx, stream_id, metadata)
        if len(streams) < BATCH:
            return written
        after = streams[-1]


class ClosedCountsWriter:
    """Writes closed windows' counts every ``interval_seconds`` until ``stop()``; an outage is logged, not fatal."""

    def __init__(self, ctx: ServiceContext, *, metadata: Mapping[str, Any] | None = None,
                 interval_seconds: float = 60.0) -> None:
        self.ctx, self.metadata, self.interval_seconds = ctx, metadata, interval_seconds
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                written = write_all_closed_counts(self.ctx, self.metadata)
                if written:
                    log_event(log, "closed counts written", events=written)
                deleted = delete_past_windows(self.ctx)  # the limits' counters of hours gone by
                if deleted:
                    log_event(log, "past limit counters deleted", rows=deleted)
            except Exception as error:  # noqa: BLE001 - logged; the loop outlives any one failure
                log_event(log, "writing closed counts failed; retrying", logging.ERROR, error=error_line(error))
            self.stopping.wait(self.interval_seconds)

    def stop(self) -> None:
        self.stopping.set()
