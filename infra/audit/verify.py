"""Audit services: verify the log against its seals and a digest, and sign the chain head.

Each runs in one REPEATABLE READ snapshot, so events and seals are read as of
one instant while writers and the sealer carry on. ``audit verify`` may run
on the read replica (``AUTHLEDGER_READ_DATABASE_URL``); its report then says
how far behind the primary the snapshot it checked was.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from attrs import evolve, frozen
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import Engine

from domain.errors import NotFound
from infra.db.replica import ReplicaLag, replica_lag
from infra.errors import NothingSealed, TamperDetected
from infra.audit.digest import Digest, sign_digest
from infra.audit.seal import (
    Backlog, ChainRange, backlog, chain_head, chain_range, check_stretch, position_range, seal_at, snapshot,
)
from projections.audit_chain import ChainCheck, Finding

Progress = Callable[[int], None]


@frozen
class VerifyReport:
    stretch: ChainRange | None  # None: nothing is sealed yet
    check: ChainCheck | None
    backlog: Backlog
    finding: Finding | None
    digest: Digest | None = None
    digest_trusted: bool = False  # signed by a key the caller trusts, not only the key inside the file
    replica: ReplicaLag | None = None  # checked on the read replica, this far behind; None: on the primary

    @property
    def ok(self) -> bool:
        return self.finding is None

    def error(self) -> TamperDetected | NothingSealed | None:
        if self.finding is None and self.check is None:
            return NothingSealed(self.summary())
        return tampered(self.finding)

    def summary(self) -> str:
        if self.finding is not None:
            return f"TAMPERED: {self.finding.describe()}"
        if self.check is None or self.stretch is None:
            return f"nothing is sealed yet; {self.backlog.sealable} events to seal: run `authledger audit seal`"
        head = self.check.head_link.hex() if self.check.head_link else "-"
        lines = [f"ok: {self.check.checked} events match their seals "
                 f"(chain index {self.stretch.first}-{self.stretch.last}, link {head})"]
        if self.backlog.sealable or self.backlog.waiting:
            lines.append(f"not sealed yet: {self.backlog.sealable} events, and {self.backlog.waiting} "
                         "waiting for older transactions")
        if self.digest is not None:
            lines.append(f"the log extends the digest of chain index {self.digest.chain_index}, "
                         f"{signed_by(self.digest, self.digest_trusted)}")
        if self.replica is not None:
            lines.append(self.replica.sentence())
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        check = self.check
        return {
            "ok": self.ok,
            "checked": check.checked if check else 0,
            "first_index": self.stretch.first if self.stretch else None,
            "last_index": self.stretch.last if self.stretch else None,
            "head_link": check.head_link.hex() if check and check.head_link else None,
            "unsealed": self.backlog.sealable,
            "waiting_for_older_transactions": self.backlog.waiting,
            "digest": {"chain_index": self.digest.chain_index, "key_id": self.digest.key_id,
                       "trusted_key": self.digest_trusted} if self.digest else None,
            "problem": finding_dict(self.finding),
        } | ({} if self.replica is None else {"replica": self.replica.as_json()})


def with_trust(report: VerifyReport, trusted: bool) -> VerifyReport:
    return evolve(report, digest_trusted=trusted)


def tampered(finding: Finding | None) -> TamperDetected | None:
    return TamperDetected(f"the log was tampered with: {finding.describe()}") if finding else None


def signed_by(digest: Digest, trusted: bool) -> str:
    if trusted:
        return f"signed by the trusted key {digest.key_id}"
    return (f"signed by {digest.key_id}, the key inside the file: compare it with the key you trust, "
            "or pass --public-key")


def finding_dict(finding: Finding | None) -> dict[str, Any] | None:
    if finding is None:
        return None
    return {
        "kind": finding.kind, "chain_index": finding.chain_index, "global_position": finding.global_position,
        "stream_id": finding.stream_id, "stream_version": finding.stream_version, "detail": finding.detail,
        "message": finding.describe(),
    }


def stretch_to_verify(
    engine: Engine, from_position: int | None = None, to_position: int | None = None,
) -> ChainRange | None:
    """What a verify would cover (for a progress bar)."""
    with engine.connect() as connection:
        if from_position is None and to_position is None:
            return chain_range(connection)
        return position_range(connection, from_position, to_position)


def verify(
    engine: Engine,
    *,
    from_position: int | None = None,
    to_position: int | None = None,
    digest: Digest | None = None,
    progress: Progress | None = None,
) -> VerifyReport:
    """Recompute the chain from the events; report the first event that no longer matches.

    A stretch (``from_position``/``to_position``) starts from the stored link
    before it. With a digest the whole chain is recomputed and its link at the
    digest's index must equal the signed one: that catches a log whose seals
    were rewritten to match forged events.
    """
    whole = from_position is None and to_position is None
    if digest is not None and not whole:
        raise ValueError("a digest is checked against the whole chain")
    with snapshot(engine) as connection, connection.begin():
        replica = replica_lag(connection)  # first: the snapshot checked is the one measured
        stretch = chain_range(connection) if whole else position_range(connection, from_position, to_position)
        if stretch is None:
            finding = _digest_beyond(digest, None) if digest else None
            return VerifyReport(None, None, backlog(engine), finding, digest, replica=replica)
        watch = (digest.chain_index,) if digest else ()
        check = check_stretch(connection, stretch, watch=watch, progress=progress)
        finding = check.finding
        if finding is None and digest is not None:
            finding = _compare_with_digest(digest, check, stretch)
    return VerifyReport(stretch, check, backlog(engine), finding, digest, replica=replica)


def _digest_beyond(digest: Digest, stretch: ChainRange | None) -> Finding:
    end = f"ends at chain index {stretch.last}" if stretch else "is empty"
    return Finding("digest-mismatch", digest.chain_index, digest.global_position, None, None,
                   f"the digest covers chain index {digest.chain_index} but the chain {end}: "
                   "sealed events were removed, or the digest belongs to another database")


def _compare_with_digest(digest: Digest, check: ChainCheck, stretch: ChainRange) -> Finding | None:
    if digest.chain_index > stretch.last:
        return _digest_beyond(digest, stretch)
    if check.links_at.get(digest.chain_index) != digest.link:
        return Finding("digest-mismatch", digest.chain_index, digest.global_position, None, None,
                       "the chain recomputed from the events does not reach the signed link: events at or before "
                       "this point were changed, removed or inserted, and the seals rewritten to match")
    return None


@frozen
class SignedHead:
    document: dict[str, Any]
    report: VerifyReport | None


def make_digest(
    engine: Engine, key: Ed25519PrivateKey, *, verify_first: bool = True, progress: Progress | None = None
) -> SignedHead:
    """Sign the current chain head, after checking the whole chain unless told not to.

    Signing a head without checking would vouch for whatever a tamperer left.
    """
    report = verify(engine, progress=progress) if verify_first else None
    if report is not None and report.finding is not None:
        raise TamperDetected(f"not signing a broken chain: {report.finding.describe()}")
    with engine.connect() as connection:
        # Sign what was checked, even if the sealer moved on meanwhile.
        stretch = report.stretch if report is not None else None
        head = seal_at(connection, stretch.last) if stretch is not None else chain_head(connection)
    if head is None:
        raise NotFound("nothing is sealed yet; run `authledger audit seal` first")
    return SignedHead(sign_digest(head, key, created_at=now_text()), report)


def now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
