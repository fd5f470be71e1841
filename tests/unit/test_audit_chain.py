"""The hash chain without a database: canonical bytes, links, the side-by-side check, offline exports."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from attrs import evolve
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given
from hypothesis import strategies as st

from infra.audit.export import EXPORT_FORMAT, verify_export
from infra.audit.digest import sign_digest
from projections.audit_chain import (
    GENESIS, LoggedEvent, Seal, canonical_json, check_chain, format_time, leaf_hash, link_events, next_link,
)


def event(position: int, transaction_id: int | None = None, **changes: object) -> LoggedEvent:
    base = LoggedEvent(
        global_position=position,
        transaction_id=transaction_id if transaction_id is not None else 1000 + position,
        stream_id=f"email:{position % 3}",
        stream_version=position,
        event_id=f"00000000-0000-0000-0000-{position:012d}",
        event_type="EmailQueued",
        schema_version=1,
        payload={"recipient": f"user{position}@example.com", "flow": "reset"},
        metadata={"actor": "test"},
        recorded_at="2025-01-02T03:04:05.678901Z",
    )
    return evolve(base, **changes)


def sealed(events: list[LoggedEvent]) -> list[Seal]:
    return [Seal(i, e.global_position, e.transaction_id, e.stream_id, e.stream_version, link)
            for i, (e, link) in enumerate(link_events(events))]


LOG = [event(n) for n in range(1, 7)]
SEALS = sealed(LOG)


def test_the_canonical_form_is_sorted_compact_utf8() -> None:
    canonical = canonical_json({"b": 1, "a": {"d": "é", "c": [1, None, True]}})
    assert canonical == '{"a":{"c":[1,null,true],"d":"é"},"b":1}'.encode()


def test_one_instant_has_one_spelling() -> None:
    moment = datetime(2025, 1, 2, 4, 4, 5, tzinfo=timezone(timedelta(hours=1)))
    assert format_time(moment) == "2025-01-02T03:04:05.000000Z"
    assert format_time(moment.astimezone(UTC)) == format_time(moment)


def test_the_chain_matches_the_known_answer_in_the_docs() -> None:
    """docs/audit.md quotes these bytes and hashes (checked there with sha256sum), for independent checkers."""
    canonical = LOG[0].canonical()
    assert canonical == (
        b'{"event_id":"00000000-0000-0000-0000-000000000001","event_type":"EmailQueued","global_position":1,'
        b'"metadata":{"actor":"test"},"payload":{"flow":"reset","recipient":"user1@example.com"},'
        b'"recorded_at":"2025-01-02T03:04:05.678901Z","schema_version":1,"stream_id":"email:1","stream_version":1}'
    )
    assert leaf_hash(canonical).hex() == "c84ae4c32c14bc04b520ff5245fccbf17f2046b0a3fc1f36bb022497d26e4e54"
    assert SEALS[0].link.hex() == "9845f91dfa9d9a594cc7a045541648a13280f9b2f45ec25c88fb8e9c8e95451b"
    assert SEALS[0].link == next_link(GENESIS, leaf_hash(canonical))


def test_an_untouched_log_checks_out() -> None:
    check = check_chain(LOG, SEALS)
    assert check.ok and check.checked == 6 and check.head_link == SEALS[-1].link


def test_a_changed_payload_is_named() -> None:
    log = list(LOG)
    log[3] = evolve(log[3], payload={**log[3].payload, "recipient": "attacker@example.com"})
    finding = check_chain(log, SEALS).finding
    assert finding is not None and (finding.kind, finding.global_position, finding.chain_index) == ("changed", 4, 3)


def test_a_deleted_event_is_named() -> None:
    finding = check_chain(LOG[:2] + LOG[3:], SEALS).finding
    assert finding is not None and (finding.kind, finding.global_position) == ("deleted", 3)


def test_an_inserted_event_is_named() -> None:
    forged = event(99, transaction_id=LOG[2].transaction_id)
    finding = check_chain(LOG[:3] + [forged] + LOG[3:], SEALS).finding
    assert finding is not None and (finding.kind, finding.global_position) == ("inserted", 99)


def test_a_moved_event_is_told_from_a_deleted_one() -> None:
    moved = evolve(LOG[1], transaction_id=5000)
    log = [LOG[0]] + LOG[2:] + [moved]
    finding = check_chain(log, SEALS, locate_event=lambda position: moved if position == 2 else None).finding
    assert finding is not None and (finding.kind, finding.global_position) == ("moved", 2)


def test_a_missing_seal_is_named() -> None:
    finding = check_chain(LOG, SEALS[:2] + SEALS[3:]).finding
    assert finding is not None and (finding.kind, finding.chain_index) == ("seal-missing", 2)


@given(st.text(min_size=1), st.integers(min_value=0, max_value=5))
def test_any_change_to_any_event_changes_the_head(new_value: str, which: int) -> None:
    log = list(LOG)
    if log[which].payload["recipient"] == new_value:
        return
    log[which] = evolve(log[which], payload={**log[which].payload, "recipient": new_value})
    assert [link for _, link in link_events(log)][-1] != SEALS[-1].link


def write_export(path: Path, key: Ed25519PrivateKey) -> None:
    """An export as `audit export` writes it, built by hand from the chain functions."""
    anchor, stretch = SEALS[1].link, list(zip(LOG[2:], SEALS[2:], strict=True))
    lines = [{"type": "header", "format": EXPORT_FORMAT, "first_index": 2, "anchor": anchor.hex()}]
    lines += [{"type": "event", "chain_index": s.chain_index, "transaction_id": e.transaction_id,
               "link": s.link.hex(), "event": e.document()} for e, s in stretch]
    lines.append({"type": "digest", **sign_digest(SEALS[-1], key, created_at="2025-01-03T00:00:00Z",
                                                   segment=(2, anchor))})
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))


def test_an_export_checks_out_offline_and_a_changed_line_does_not(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "export.jsonl"
    write_export(path, key)
    check = verify_export(path, key.public_key())
    assert check.ok and check.trusted and (check.events, check.first_index, check.last_index) == (4, 2, 5)

    lines = path.read_text().splitlines(keepends=True)
    lines[2] = lines[2].replace("user4@", "user5@")
    path.write_text("".join(lines))
    check = verify_export(path, key.public_key())
    assert check.finding is not None and check.finding.global_position == 4


def test_an_added_field_in_an_exported_event_counts_as_a_change(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "export.jsonl"
    write_export(path, key)
    lines = path.read_text().splitlines(keepends=True)
    line = json.loads(lines[1])
    line["event"]["note"] = "approved by security"
    lines[1] = json.dumps(line) + "\n"
    path.write_text("".join(lines))
    assert not verify_export(path, None).ok


def offline_check_script() -> str:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "audit.md").read_text()
    return docs.split("```python offline-check\n", 1)[1].split("```", 1)[0]


def test_the_documented_offline_procedure_accepts_an_export_and_rejects_a_changed_one(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    public = base64.b64encode(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()
    script, export = tmp_path / "check.py", tmp_path / "export.jsonl"
    script.write_text(offline_check_script())
    write_export(export, key)
    result = subprocess.run([sys.executable, str(script), str(export), public], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout == "ok: 4 events, chain index 2-5\n", result.stderr
    export.write_text(export.read_text().replace("user3@", "user8@"))
    result = subprocess.run([sys.executable, str(script), str(export), public], capture_output=True, text=True)
    assert result.returncode != 0 and "chain index 2 (line 2) was changed" in result.stderr
