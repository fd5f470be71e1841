"""The audit page's services: a chain verification running in the background, when the log was last sealed,
and a signed digest to download.

``VerificationRunner`` runs ``infra.audit.verify.verify`` (the very check
`authledger audit verify` makes) in a thread of its own, one at a time: a
start while one runs answers the running one, so a reviewer pressing the
button twice, or two reviewers at once, never load the database with two
whole-log reads. Its status says events checked out of the total and, once
done, the report or the error. One runner per process (``serve`` keeps one);
it does not coordinate across processes.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

import attrs
from attrs import frozen
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import Engine, text

from infra.audit.seal import Backlog, backlog
from infra.audit.verify import Progress, VerifyReport, make_digest, stretch_to_verify, verify
from infra.clock import Clock, SystemClock
from infra.errors import AuthledgerError
from infra.logs import log_event

log = logging.getLogger("authledger.audit")

# The newest seal by its primary key: one index probe however long the chain.
LAST_SEAL = text("SELECT chain_index, global_position, sealed_at FROM seals ORDER BY chain_index DESC LIMIT 1")

Verify = Callable[[Engine, Progress], VerifyReport]


def _verify_whole_chain(engine: Engine, progress: Progress) -> VerifyReport:
    return verify(engine, progress=progress)


@frozen
class VerificationStatus:
    """Where one background verification stands."""

    job_id: UUID
    started_at: datetime
    state: str  # "running", "ok", "tampered", "nothing sealed" or "failed"
    checked: int  # events checked so far
    total: int  # events in the sealed chain when it started
    finished_at: datetime | None = None
    summary: str | None = None  # the report in words, as `audit verify` prints it, or the error
    report: dict[str, Any] | None = None  # `audit verify --json`'s document

    @property
    def running(self) -> bool:
        return self.state == "running"

    def as_dict(self) -> dict[str, Any]:
        return {"job_id": str(self.job_id), "state": self.state, "checked": self.checked, "total": self.total,
                "started_at": self.started_at.isoformat(),
                "finished_at": self.finished_at.isoformat() if self.finished_at else None,
                "summary": self.summary, "report": self.report}


def _outcome(report: VerifyReport) -> str:
    if report.finding is not None:
        return "tampered"
    return "nothing sealed" if report.check is None else "ok"


class VerificationRunner:
    """Starts chain verifications in the background, one at a time, and tells how the last one stands."""

    def __init__(self, engine: Engine, *, clock: Clock | None = None, verify: Verify = _verify_whole_chain) -> None:
        self._engine, self._clock, self._verify = engine, clock or SystemClock(), verify
        self._lock = threading.Lock()
        self._status: VerificationStatus | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> VerificationStatus:
        """Start a verification, or, while one runs, answer that one (same ``job_id``)."""
        with self._lock:
            if self._status is not None and self._status.running:
                return self._status
            stretch = stretch_to_verify(self._engine)
            self._status = VerificationStatus(uuid4(), self._clock.now(), "running", 0,
                                              stretch.length if stretch else 0)
            job_id = self._status.job_id
            self._thread = threading.Thread(target=self._run, args=(job_id,), name=f"audit-verify-{job_id}",
                                            daemon=True)
            self._thread.start()
            return self._status

    def status(self) -> VerificationStatus | None:
        """The running or the last finished verification; None before the first."""
        with self._lock:
            return self._status

    def wait(self, timeout: float | None = None) -> VerificationStatus | None:
        """Wait for the running verification to finish (for tests and the CLI); its status."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return self.status()

    def _progress(self, job_id: UUID) -> Progress:
        def advance(checked: int) -> None:
            with self._lock:
                if self._status is not None and self._status.job_id == job_id:
                    self._status = _evolve(self._status, checked=self._status.checked + checked)
        return advance

    def _run(self, job_id: UUID) -> None:
        try:
            report = self._verify(self._engine, self._progress(job_id))
            finished = {"state": _outcome(report), "summary": report.summary(), "report": report.as_dict(),
                        "checked": report.check.checked if report.check else 0}
        except AuthledgerError as error:
            finished = {"state": "failed", "summary": str(error)}
        except Exception as error:  # noqa: BLE001 - a thread's error would otherwise vanish: the page must say it failed
            log_event(log, "audit verification failed", logging.ERROR, job_id=job_id, error=type(error).__name__)
            finished = {"state": "failed", "summary": f"the verification stopped: {type(error).__name__}"}
        with self._lock:
            assert self._status is not None and self._status.job_id == job_id
            self._status = _evolve(self._status, finished_at=self._clock.now(), **finished)
        log_event(log, "audit verification finished", job_id=job_id, state=finished["state"])


def _evolve(status: VerificationStatus, **changes: Any) -> VerificationStatus:
    return attrs.evolve(status, **changes)


@frozen
class SealState:
    """When the log was last sealed, how far, and what still waits."""

    last_sealed_at: datetime | None  # None: nothing sealed yet
    chain_index: int | None
    global_position: int | None
    backlog: Backlog

    def as_dict(self) -> dict[str, Any]:
        return {"last_sealed_at": self.last_sealed_at.isoformat() if self.last_sealed_at else None,
                "chain_index": self.chain_index, "global_position": self.global_position,
                "unsealed": self.backlog.sealable, "waiting_for_older_transactions": self.backlog.waiting}


def seal_state(engine: Engine) -> SealState:
    """When the newest seal was written (``seals.sealed_at``), its chain index and position, and the backlog."""
    with engine.connect() as connection:
        head = connection.execute(LAST_SEAL).first()
    waiting = backlog(engine)
    if head is None:
        return SealState(None, None, None, waiting)
    return SealState(head.sealed_at, head.chain_index, head.global_position, waiting)


@frozen
class DigestDownload:
    filename: str
    content: bytes  # the digest JSON exactly as `audit digest --out` writes it
    media_type: str = "application/json"


def digest_download(engine: Engine, key: Ed25519PrivateKey) -> DigestDownload:
    """A signed digest of the chain head, checked first (``make_digest``), as a file to download.

    ``TamperDetected`` for a broken chain, ``NotFound`` when nothing is sealed.
    """
    document = make_digest(engine, key).document
    content = (json.dumps(document, indent=2) + "\n").encode("utf-8")
    return DigestDownload(f"authledger-digest-{document['chain_index']}.json", content)
