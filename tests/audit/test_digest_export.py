"""Signed digests and auditor exports through the CLI, and the clear errors around them."""

from __future__ import annotations

import base64
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import Engine

from infra.audit import seal as sealer
from infra.errors import KeyNotTrusted, NothingSealed
from tests.support.audit_log import seed
from tests.support.cli import Env, process_env, run_cli
from tests.support.keys import OTHER_SIGNING_KEY, SIGNING_KEY

AUTHLEDGER = str(Path(sys.executable).parent / "authledger")


@pytest.fixture
def sealed(engine: Engine) -> list[str]:
    streams = seed(engine, 4)
    sealer.seal(engine)
    return streams


@pytest.fixture
def export_file(sealed: list[str], env: Env, tmp_path: Path) -> Path:
    out = tmp_path / "audit.jsonl"
    outcome = run_cli(env, "audit", "export", "--out", str(out), "--json")
    assert outcome.exit_code == 0, outcome.output
    assert json.loads(outcome.stdout)["events"] == 12
    return out


def public_key_b64(private_b64: str) -> str:
    key = Ed25519PrivateKey.from_private_bytes(base64.b64decode(private_b64))
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def test_a_digest_is_printed_signed_and_never_shows_the_key(sealed: list[str], env: Env) -> None:
    outcome = run_cli(env, "audit", "digest")
    assert outcome.exit_code == 0, outcome.output
    digest = json.loads(outcome.stdout)
    assert digest["format"] == "authledger-digest/1" and digest["chain_index"] == 11
    assert digest["public_key"] == public_key_b64(SIGNING_KEY)
    assert SIGNING_KEY not in outcome.output


def test_a_digest_can_be_signed_with_a_pem_key_file(sealed: list[str], env: Env, tmp_path: Path) -> None:
    pem = tmp_path / "signing.pem"
    pem.write_bytes(Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    digest = tmp_path / "digest.json"
    env = {**env, "AUTHLEDGER_SIGNING_KEY": None, "AUTHLEDGER_SIGNING_KEY_FILE": str(pem)}
    assert run_cli(env, "audit", "digest", "--out", str(digest)).exit_code == 0
    outcome = run_cli(env, "audit", "verify", "--digest", str(digest))
    assert outcome.exit_code == 0 and "signed by the trusted key" in outcome.output


def test_without_a_signing_key_digest_and_export_refuse_clearly(
    sealed: list[str], env: Env, tmp_path: Path
) -> None:
    for args in (["digest"], ["export", "--out", str(tmp_path / "x.jsonl")]):
        outcome = run_cli({**env, "AUTHLEDGER_SIGNING_KEY": None}, "audit", *args)
        assert outcome.exit_code == 78
        assert "no signing key: set AUTHLEDGER_SIGNING_KEY" in outcome.output
    assert not (tmp_path / "x.jsonl").exists()


def test_a_malformed_signing_key_is_refused_without_repeating_it(env: Env) -> None:
    secret = base64.b64encode(b"s3cret-but-too-short").decode()
    outcome = run_cli({**env, "AUTHLEDGER_SIGNING_KEY": secret}, "audit", "digest")
    assert outcome.exit_code == 78
    assert "AUTHLEDGER_SIGNING_KEY must be the base64 of a raw 32-byte Ed25519 private key" in outcome.output
    assert secret not in outcome.output


def test_a_key_and_a_key_file_at_once_are_refused(env: Env, tmp_path: Path) -> None:
    outcome = run_cli({**env, "AUTHLEDGER_SIGNING_KEY_FILE": str(tmp_path / "k.pem")}, "audit", "digest")
    assert outcome.exit_code == 78 and "not both" in outcome.output


def test_an_unreadable_key_file_is_named(env: Env, tmp_path: Path) -> None:
    env = {**env, "AUTHLEDGER_SIGNING_KEY": None, "AUTHLEDGER_SIGNING_KEY_FILE": str(tmp_path / "missing.pem")}
    outcome = run_cli(env, "audit", "digest")
    assert outcome.exit_code == 78 and "missing.pem: No such file or directory" in outcome.output


def test_a_digest_signed_by_another_key_is_rejected(sealed: list[str], env: Env, tmp_path: Path) -> None:
    digest = tmp_path / "digest.json"
    assert run_cli(env, "audit", "digest", "--out", str(digest)).exit_code == 0
    outcome = run_cli({**env, "AUTHLEDGER_SIGNING_KEY": OTHER_SIGNING_KEY}, "audit", "verify", "--digest", str(digest))
    assert outcome.exit_code == 65
    assert "was signed by key ed25519:" in outcome.output and "not by the trusted key" in outcome.output
    outcome = run_cli({**env, "AUTHLEDGER_SIGNING_KEY": None}, "audit", "verify", "--digest", str(digest),
                      "--public-key", public_key_b64(OTHER_SIGNING_KEY))
    assert outcome.exit_code == 65


@pytest.mark.parametrize("corrupt", [
    "not json at all",
    json.dumps({"format": "something-else"}),
    "{}",
])
def test_a_corrupt_digest_file_is_a_one_line_error(
    sealed: list[str], env: Env, tmp_path: Path, corrupt: str
) -> None:
    digest = tmp_path / "digest.json"
    digest.write_text(corrupt)
    outcome = run_cli(env, "audit", "verify", "--digest", str(digest))
    assert outcome.exit_code == 65
    assert outcome.output.count("\n") == 1 and outcome.output.startswith("Error: digest ")


def test_a_digest_changed_after_signing_fails_its_signature(sealed: list[str], env: Env, tmp_path: Path) -> None:
    digest = tmp_path / "digest.json"
    assert run_cli(env, "audit", "digest", "--out", str(digest)).exit_code == 0
    document = json.loads(digest.read_text())
    document["chain_index"] = 5
    digest.write_text(json.dumps(document))
    outcome = run_cli(env, "audit", "verify", "--digest", str(digest))
    assert outcome.exit_code == 65 and "the signature does not verify" in outcome.output


def test_a_missing_digest_file_is_named(env: Env, tmp_path: Path) -> None:
    outcome = run_cli(env, "audit", "verify", "--digest", str(tmp_path / "nope.json"))
    assert outcome.exit_code == 2 and "cannot read digest" in outcome.output


def test_an_export_verifies_offline_with_no_database_at_all(export_file: Path, tmp_path: Path) -> None:
    """A separate process, pointed at a server that does not exist and an empty data directory."""
    env = process_env({"DATABASE_URL": "postgresql://nobody@127.0.0.1:1/nothing",
           "AUTHLEDGER_DATA_DIR": str(tmp_path / "no-data"), "AUTHLEDGER_SIGNING_KEY": ""})
    result = subprocess.run(
        [AUTHLEDGER, "audit", "verify", "--export", str(export_file), "--public-key", public_key_b64(SIGNING_KEY)],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "ok: export" in result.stdout and "12 events" in result.stdout and "trusted key" in result.stdout
    assert not (tmp_path / "no-data").exists()


def test_a_changed_line_in_an_export_fails(export_file: Path, env: Env) -> None:
    lines = export_file.read_text().splitlines(keepends=True)
    lines[5] = lines[5].replace("worker-1", "worker-9")
    export_file.write_text("".join(lines))
    outcome = run_cli({**env, "DATABASE_URL": None}, "audit", "verify", "--export", str(export_file))
    assert outcome.exit_code == 8
    assert "line 6 does not match its link" in outcome.output


def test_an_export_cut_short_or_spliced_fails(export_file: Path, env: Env) -> None:
    lines = export_file.read_text().splitlines(keepends=True)
    export_file.write_text("".join(lines[:-1]))
    outcome = run_cli({**env, "DATABASE_URL": None}, "audit", "verify", "--export", str(export_file))
    assert outcome.exit_code == 65 and "cut short" in outcome.output
    # Drop the first event and move the anchor on to its link: the chain still closes, the signature does not.
    header = json.loads(lines[0])
    header["first_index"], header["anchor"] = 1, json.loads(lines[1])["link"]
    export_file.write_text(json.dumps(header) + "\n" + "".join(lines[2:]))
    outcome = run_cli({**env, "DATABASE_URL": None}, "audit", "verify", "--export", str(export_file))
    assert outcome.exit_code == 8 and "cut or spliced" in outcome.output


def test_an_export_of_a_time_range_holds_only_the_chain_around_it(
    engine: Engine, sealed: list[str], env: Env, tmp_path: Path
) -> None:
    out = tmp_path / "none.jsonl"
    outcome = run_cli(env, "audit", "export", "--from", "1999-01-01", "--to", "2000-01-01", "--out", str(out))
    assert outcome.exit_code == 3 and "no sealed events were recorded in that time range" in outcome.output
    outcome = run_cli(env, "audit", "export", "--from", "2000-01-01T00:00:00Z", "--out", str(out))
    assert outcome.exit_code == 0, outcome.output
    outcome = run_cli(env, "audit", "export", "--from", "yesterday", "--out", str(out))
    assert outcome.exit_code == 2 and "is not an ISO 8601 date or time" in outcome.output


def test_an_unreadable_export_is_a_one_line_error(tmp_path: Path, env: Env) -> None:
    outcome = run_cli({**env, "DATABASE_URL": None}, "audit", "verify", "--export", str(tmp_path / "missing.jsonl"))
    assert outcome.exit_code == 2 and "cannot read export" in outcome.output
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("{not json\n")
    outcome = run_cli({**env, "DATABASE_URL": None}, "audit", "verify", "--export", str(garbage))
    assert outcome.exit_code == 65 and "line 1 is not JSON" in outcome.output


def test_an_export_without_a_trusted_key_is_refused_unless_the_embedded_key_is_trusted_explicitly(
    export_file: Path, env: Env,
) -> None:
    outcome = run_cli({**env, "DATABASE_URL": None, "AUTHLEDGER_SIGNING_KEY": None}, "audit", "verify", "--export",
                      str(export_file))
    assert outcome.exit_code == KeyNotTrusted.exit_code == 12
    assert "carries its own public key, which cannot vouch for itself: pass --public-key" in outcome.output
    outcome = run_cli({**env, "DATABASE_URL": None, "AUTHLEDGER_SIGNING_KEY": None}, "audit", "verify", "--export",
                      str(export_file), "--trust-embedded-key")
    assert outcome.exit_code == 0 and "the key inside the file" in outcome.output


def test_the_command_an_export_suggests_verifies_it_without_the_signing_key(
    sealed: list[str], env: Env, tmp_path: Path
) -> None:
    out = tmp_path / "with space.jsonl"
    outcome = run_cli(env, "audit", "export", "--out", str(out))
    assert outcome.exit_code == 0, outcome.output
    suggested = outcome.output.split("check it with `")[1].split("`")[0]
    [program, *args] = shlex.split(suggested)
    assert program == "authledger"
    checked = run_cli({**env, "DATABASE_URL": None, "AUTHLEDGER_SIGNING_KEY": None}, *args)
    assert checked.exit_code == 0 and "signed by the trusted key" in checked.output, checked.output


def test_the_public_key_is_printed_in_both_forms_verify_accepts(
    export_file: Path, tmp_path: Path, env: Env
) -> None:
    raw = run_cli({**env, "DATABASE_URL": None}, "audit", "public-key")
    assert raw.exit_code == 0 and raw.output.strip() == public_key_b64(SIGNING_KEY)
    pem = run_cli({**env, "DATABASE_URL": None}, "audit", "public-key", "--pem")
    assert pem.exit_code == 0 and pem.output.startswith("-----BEGIN PUBLIC KEY-----")
    (tmp_path / "signing.pub.pem").write_text(pem.output)
    for key in (raw.output.strip(), str(tmp_path / "signing.pub.pem")):
        outcome = run_cli({**env, "DATABASE_URL": None, "AUTHLEDGER_SIGNING_KEY": None}, "audit", "verify", "--export",
                          str(export_file), "--public-key", key)
        assert outcome.exit_code == 0 and "signed by the trusted key" in outcome.output


def test_a_digest_into_a_missing_folder_creates_it(sealed: list[str], env: Env, tmp_path: Path) -> None:
    out = tmp_path / "digests" / "2025" / "head.json"
    outcome = run_cli(env, "audit", "digest", "--out", str(out))
    assert outcome.exit_code == 0, outcome.output
    assert json.loads(out.read_text())["chain_index"] == 11


def test_verify_with_nothing_sealed_exits_11_and_says_so(engine: Engine, env: Env) -> None:
    seed(engine, 1)
    outcome = run_cli(env, "audit", "verify")
    assert outcome.exit_code == NothingSealed.exit_code == 11
    assert outcome.stderr.endswith("Error: nothing is sealed yet; 3 events to seal: run `authledger audit seal`\n")
    outcome = run_cli(env, "audit", "verify", "--json")
    assert outcome.exit_code == 11 and json.loads(outcome.stdout)["checked"] == 0
