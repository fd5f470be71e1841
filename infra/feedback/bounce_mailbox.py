"""Reading a Maildir of bounce reports (RFC 3464), each recorded once, the bad ones set aside and told.

The envelope sender's mailbox (or a folder its bounces are sorted into) is a
Maildir: new mail arrives in ``new/``. Each file is read
(``infra.feedback.dsn``), recorded (``infra.services.feedback``, any tenant:
the operator reads the deployment's mailbox), then moved to ``cur/`` with the
"seen" flag, so that a second run reads it no more; a file that is no report
about an email of ours is moved to ``cur/`` flagged and named in the result,
not fatal to the run. Moving is ``rename`` within one Maildir: atomic.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from attrs import field, frozen

from domain.errors import AuthledgerError, InvalidInput, NotFound
from infra.feedback.dsn import read_report
from infra.logs import error_line, log_event
from infra.services.feedback import record_feedback
from infra.services.unit_of_work import ServiceContext

log = logging.getLogger("authledger.bounces")

SEEN, FLAGGED = ":2,S", ":2,F"  # Maildir info: read, and read but set aside


@frozen
class Ingested:
    recorded: int = 0
    repeated: int = 0
    bad: list[tuple[str, str]] = field(factory=list)  # (file name, why): reported, not fatal

    def as_dict(self) -> dict[str, Any]:
        return {"recorded": self.recorded, "repeated": self.repeated,
                "bad": [{"file": name, "problem": why} for name, why in self.bad]}


def check_maildir(path: Path) -> Path:
    """``path`` when it is a Maildir (``new/`` and ``cur/`` folders); ``InvalidInput`` otherwise."""
    if not (path / "new").is_dir() or not (path / "cur").is_dir():
        raise InvalidInput(f"{path} is not a Maildir: it needs new/ and cur/ folders")
    return path


def ingest_maildir(
    ctx: ServiceContext, path: Path, metadata: Mapping[str, Any] | None = None, *,
    progress: Callable[[int], None] | None = None,
) -> Ingested:
    """Record every report in ``path``'s ``new/``, oldest file name first, and move each file to ``cur/``."""
    check_maildir(path)
    recorded = repeated = 0
    bad: list[tuple[str, str]] = []
    for name in sorted(os.listdir(path / "new")):
        source = path / "new" / name
        if not source.is_file():
            continue
        try:
            ref, feedback = read_report(source.read_bytes())
            outcome = record_feedback(ctx, ref, feedback, metadata, tenant=None)
        except (InvalidInput, NotFound) as error:
            bad.append((name, error.message))
            source.rename(path / "cur" / f"{name}{FLAGGED}")
        except AuthledgerError:
            raise  # the database is down, say: the file stays in new/ for the next run
        else:
            recorded, repeated = recorded + outcome.recorded, repeated + (not outcome.recorded)
            source.rename(path / "cur" / f"{name}{SEEN}")
        if progress is not None:
            progress(1)
    return Ingested(recorded, repeated, bad)


class BounceMailboxWatcher:
    """Ingests the bounce Maildir every ``interval_seconds`` beside the API until ``stop()``; an outage or a
    missing folder is logged, not fatal (``serve`` runs it when AUTHLEDGER_BOUNCE_MAILDIR is set)."""

    def __init__(self, ctx: ServiceContext, path: Path, *, metadata: Mapping[str, Any] | None = None,
                 interval_seconds: float = 30.0) -> None:
        self.ctx, self.path, self.metadata, self.interval_seconds = ctx, path, metadata, interval_seconds
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                done = ingest_maildir(self.ctx, self.path, self.metadata)
                if done.recorded or done.repeated or done.bad:
                    log_event(log, "bounce reports read", recorded=done.recorded, repeated=done.repeated,
                              set_aside=len(done.bad))
            except Exception as error:  # noqa: BLE001 - logged; the loop outlives any one failure
                log_event(log, "reading bounce reports failed; retrying", logging.ERROR, error=error_line(error))
            self.stopping.wait(self.interval_seconds)

    def stop(self) -> None:
        self.stopping.set()
