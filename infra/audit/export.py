"""Auditor exports: a stretch of the chain as JSON Lines, checkable offline.

    {"type": "header", "format": "authledger-export/1", "first_index": a, "anchor": <link a-1>, ...}
    {"type": "event", "chain_index": a, "transaction_id": ..., "link": <hex>, "event": {...}}
    ...
    {"type": "digest", <a signed digest of the last link, with segment {first_index, anchor}>}

An export of one case (the console's download: ``export_case``) carries in
full only the events of that case; every other event of the stretch is an
``{"type": "elided", "chain_index": i, "leaf": <hex>, "link": <hex>}`` line,
its leaf hash without its content, so the chain is still recomputed link by
link to the signed head while no other user's event leaves the database.

The ``event`` object is exactly what the chain hashes (docs/audit.md), so an
auditor recomputes every link from the anchor with nothing but SHA-256 and
checks the last one against the signature. The signature covers the anchor
and first index too: an export cannot be cut short at either end unnoticed.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Collection, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from attrs import frozen
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from sqlalchemy import Connection, Engine, text

from domain.errors import InvalidInput, NotFound
from infra.errors import DigestInvalid, TamperDetected
from infra.audit.verify import finding_dict, now_text, signed_by
from infra.audit.digest import Digest, check_trust, parse_digest, sign_digest
from infra.audit.seal import ChainRange, chain_range, check_stretch, seal_at, snapshot
from projections.audit_chain import (
    PROGRESS_STEP, Finding, LoggedEvent, Seal, canonical_json, format_time, leaf_hash, next_link,
)

EXPORT_FORMAT = "authledger-export/1"
Progress = Callable[[int], None]

# The stretch of the chain that holds these events (those already sealed).
POSITIONS_RANGE = text("""
    SELECT min(chain_index) AS first, max(chain_index) AS last, count(*) AS sealed
      FROM seals WHERE global_position = ANY(CAST(:positions AS bigint[]))
""")

# The contiguous stretch of the chain from the first to the last sealed event
# recorded in [since, until). recorded_at is the appending transaction's start,
# so a few events of neighbouring times may fall inside: a chain has no gaps.
TIME_RANGE = text("""
    SELECT min(s.chain_index) AS first, max(s.chain_index) AS last
      FROM seals s JOIN events e USING (global_position)
     WHERE e.recorded_at >= coalesce(CAST(:since AS timestamptz), '-infinity')
       AND e.recorded_at < coalesce(CAST(:until AS timestamptz), 'infinity')
""")


@frozen
class ExportResult:
    path: Path
    events: int
    first_index: int
    last_index: int
    key_id: str


def export(
    engine: Engine,
    key: Ed25519PrivateKey,
    out: Path,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    progress: Progress | None = None,
) -> ExportResult:
    """Write the sealed events recorded in [since, until) with their links and a signed digest.

    The events are checked against their seals while they are written; a log
    that no longer matches is not exported. The file appears whole or not at all.
    """
    with snapshot(engine) as connection, connection.begin():
        stretch = _time_stretch(connection, since, until)
        head = seal_at(connection, stretch.last)
        assert head is not None
        with _replaced_atomically(out) as file:
            file.write(_line(_header(stretch, since, until)))

            def write(event: LoggedEvent, seal: Seal) -> None:
                file.write(_line({"type": "event", "chain_index": seal.chain_index,
                                  "transaction_id": event.transaction_id, "link": seal.link.hex(),
                                  "event": event.document()}))

            check = check_stretch(connection, stretch, on_entry=write, progress=progress)
            if check.finding is not None:
                raise TamperDetected(f"export refused, the log does not match its seals: {check.finding.describe()}")
            digest = sign_digest(head, key, created_at=now_text(), segment=(stretch.first, stretch.anchor))
            file.write(_line({"type": "digest", **digest}))
    return ExportResult(out, check.checked, stretch.first, stretch.last, digest["key_id"])


@frozen
class CaseExport:
    events: int  # the case's events in the export, in full
    elided: int  # the other events of the stretch, as leaf hashes
    unsealed: int  # the case's events not sealed yet, so not in the export


def export_case(engine: Engine, key: Ed25519PrivateKey, positions: Collection[int], file: TextIO) -> CaseExport:
    """Write the events at ``positions`` in full, and the rest of their stretch of the chain elided, then a digest.

    ``audit verify --export`` checks the result like any export; NotFound when none of them is sealed yet.
    """
    wanted = set(positions)
    with snapshot(engine) as connection, connection.begin():
        row = connection.execute(POSITIONS_RANGE, {"positions": sorted(wanted)}).one()
        if row.first is None:
            raise NotFound("none of these events is sealed yet: run `authledger audit seal` first")
        stretch = chain_range(connection, row.first, row.last)
        assert stretch is not None
        head = seal_at(connection, stretch.last)
        assert head is not None
        file.write(_line(_header(stretch, None, None)))
        elided = 0

        def write(event: LoggedEvent, seal: Seal) -> None:
            nonlocal elided
            if event.global_position in wanted:
                file.write(_line({"type": "event", "chain_index": seal.chain_index,
                                  "transaction_id": event.transaction_id, "link": seal.link.hex(),
                                  "event": event.document()}))
            else:
                elided += 1
                file.write(_line({"type": "elided", "chain_index": seal.chain_index,
                                  "leaf": leaf_hash(canonical_json(event.document())).hex(), "link": seal.link.hex()}))

        check = check_stretch(connection, stretch, on_entry=write)
        if check.finding is not None:
            raise TamperDetected(f"export refused, the log does not match its seals: {check.finding.describe()}")
        digest = sign_digest(head, key, created_at=now_text(), segment=(stretch.first, stretch.anchor))
        file.write(_line({"type": "digest", **digest}))
    return CaseExport(row.sealed, elided, len(wanted) - row.sealed)


def stretch_for_times(engine: Engine, since: datetime | None, until: datetime | None) -> ChainRange:
    """The stretch of the chain an export of [since, until) covers (for a progress bar)."""
    with engine.connect() as connection:
        return _time_stretch(connection, since, until)


def _time_stretch(connection: Connection, since: datetime | None, until: datetime | None) -> ChainRange:
    row = connection.execute(TIME_RANGE, {"since": since, "until": until}).one()
    stretch = chain_range(connection, row.first, row.last) if row.first is not None else None
    if stretch is None:
        raise NotFound("no sealed events were recorded in that time range")
    return stretch


def _header(stretch: ChainRange, since: datetime | None, until: datetime | None) -> dict[str, Any]:
    return {
        "type": "header",
        "format": EXPORT_FORMAT,
        "from": format_time(since) if since else None,
        "to": format_time(until) if until else None,
        "first_index": stretch.first,
        "last_index": stretch.last,
        "anchor": stretch.anchor.hex(),
        "created_at": now_text(),
        "procedure": "docs/audit.md: leaf = SHA-256(0x00 || canonical JSON of event); "
                     "link = SHA-256(0x01 || previous link || leaf); check the last link's signature",
    }


def _line(document: dict[str, Any]) -> str:
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n"


@contextlib.contextmanager
def _replaced_atomically(out: Path) -> Iterator[TextIO]:
    partial = out.with_name(out.name + ".partial")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with partial.open("w", encoding="utf-8") as file:
            yield file
        os.replace(partial, out)
    except OSError as error:
        partial.unlink(missing_ok=True)
        raise InvalidInput(f"cannot write export {out}: {error.strerror or error}") from None
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


@frozen
class ExportCheck:
    """The offline check of an export."""

    path: Path
    events: int
    first_index: int
    last_index: int | None
    digest: Digest | None
    trusted: bool  # signed by a key the caller trusts, not just the key inside the file
    finding: Finding | None

    @property
    def ok(self) -> bool:
        return self.finding is None

    def error(self) -> TamperDetected | None:
        if self.finding is None:
            return None
        return TamperDetected(f"export {self.path} was tampered with: {self.finding.describe()}")

    def summary(self) -> str:
        if self.finding is not None:
            return f"TAMPERED: {self.finding.describe()}"
        assert self.digest is not None
        return (f"ok: export {self.path} holds {self.events} events (chain index {self.first_index}-{self.last_index}) "
                f"that reach its digest, {signed_by(self.digest, self.trusted)}")

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "path": str(self.path), "events": self.events, "first_index": self.first_index,
            "last_index": self.last_index, "key_id": self.digest.key_id if self.digest else None,
            "trusted_key": self.trusted, "problem": finding_dict(self.finding),
        }


def events_in_export(path: Path) -> int:
    """How many event lines an export holds, for a progress bar (0 if it cannot be read: the check says why)."""
    try:
        with path.open("rb") as file:
            return max(sum(1 for _ in file) - 2, 0)
    except OSError:
        return 0


def verify_export(path: Path, trusted: Ed25519PublicKey | None, progress: Progress | None = None) -> ExportCheck:
    """Recompute an export's links from its anchor and check the signed head; no database involved."""
    try:
        with path.open(encoding="utf-8") as file:
            return _check_lines(path, enumerate(file, start=1), trusted, progress)
    except OSError as error:
        raise InvalidInput(f"cannot read export {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise DigestInvalid(f"export {path} is corrupt: not UTF-8 text") from None


def _check_lines(path: Path, lines: Iterator[tuple[int, str]], trusted: Ed25519PublicKey | None,
                 progress: Progress | None) -> ExportCheck:
    source = f"export {path}"
    header = _json(next(lines, (1, "")), source)
    if header.get("type") != "header" or header.get("format") != EXPORT_FORMAT:
        raise DigestInvalid(f"{source} is not an authledger export ({EXPORT_FORMAT}): its first line is no header")
    try:
        first, link = int(header["first_index"]), bytes.fromhex(header["anchor"])
    except (KeyError, TypeError, ValueError):
        raise DigestInvalid(f"{source} is corrupt: its header lacks first_index or anchor") from None
    anchor, index, count = link, first, 0
    for number, raw in lines:
        line = _json((number, raw), source)
        if line.get("type") == "digest":
            if next(lines, None) is not None:
                raise DigestInvalid(f"{source} is corrupt: lines follow the digest on line {number}")
            digest = parse_digest({k: v for k, v in line.items() if k != "type"}, source)
            is_trusted = check_trust(digest, trusted, source)
            finding = _compare_head(digest, first, anchor, index - 1, link) if count else _empty(digest)
            return ExportCheck(path, count, first, index - 1 if count else None, digest, is_trusted, finding)
        if line.get("type") == "elided":  # another case's event: its leaf hash stands for it
            leaf, stored = _elided_line(line, number, index, source)
            link = next_link(link, leaf)
            if link != stored:
                finding = Finding("changed", index, None, None, None,
                                  f"line {number} does not match its link: it, or a line before it, was changed")
                return ExportCheck(path, count, first, index - 1 if count else None, None, False, finding)
            index, count = index + 1, count + 1
            continue
        event, canonical, stored = _event_line(line, number, index, source)
        link = next_link(link, leaf_hash(canonical))
        if link != stored:
            finding = Finding("changed", index, event.global_position, event.stream_id, event.stream_version,
                              f"line {number} does not match its link: it, or a line before it, was changed")
            return ExportCheck(path, count, first, index - 1 if count else None, None, False, finding)
        index, count = index + 1, count + 1
        if progress is not None and count % PROGRESS_STEP == 0:
            progress(PROGRESS_STEP)
    raise DigestInvalid(f"{source} ends without its signed digest: the file was cut short")


def _json(numbered: tuple[int, str], source: str) -> dict[str, Any]:
    number, raw = numbered
    try:
        value = json.loads(raw)
    except ValueError:
        raise DigestInvalid(f"{source} is corrupt: line {number} is not JSON") from None
    if not isinstance(value, dict):
        raise DigestInvalid(f"{source} is corrupt: line {number} is not a JSON object")
    return value


def _event_line(line: dict[str, Any], number: int, index: int, source: str) -> tuple[LoggedEvent, bytes, bytes]:
    """The event, the bytes to hash (the object exactly as given: an added field counts) and the stored link."""
    try:
        if line["type"] != "event" or line["chain_index"] != index:
            raise DigestInvalid(f"{source} is corrupt: line {number} should be the event with chain index {index}")
        event = LoggedEvent.from_document(line["event"], int(line["transaction_id"]))
        return event, canonical_json(line["event"]), bytes.fromhex(line["link"])
    except (KeyError, TypeError, ValueError):
        raise DigestInvalid(f"{source} is corrupt: line {number} is not a well-formed event line") from None


def _elided_line(line: dict[str, Any], number: int, index: int, source: str) -> tuple[bytes, bytes]:
    """An elided event's leaf hash and the stored link."""
    try:
        if line["chain_index"] != index:
            raise DigestInvalid(f"{source} is corrupt: line {number} should be the event with chain index {index}")
        leaf, stored = bytes.fromhex(line["leaf"]), bytes.fromhex(line["link"])
    except (KeyError, TypeError, ValueError):
        raise DigestInvalid(f"{source} is corrupt: line {number} is not a well-formed elided line") from None
    if len(leaf) != 32:
        raise DigestInvalid(f"{source} is corrupt: line {number} is not a well-formed elided line")
    return leaf, stored


def _compare_head(digest: Digest, first: int, anchor: bytes, last: int, link: bytes) -> Finding | None:
    if digest.segment != (first, anchor):
        return Finding("digest-mismatch", first, digest.global_position, None, None,
                       "the header's first index or anchor differs from the signed one: the export was cut or spliced")
    if digest.chain_index != last or digest.link != link:
        return Finding("digest-mismatch", last, digest.global_position, None, None,
                       "the recomputed chain does not reach the signed link: lines were changed, removed or added")
    return None


def _empty(digest: Digest) -> Finding:
    return Finding("digest-mismatch", digest.chain_index, digest.global_position, None, None,
                   "the export holds no events, but its digest signs some: they were removed")
