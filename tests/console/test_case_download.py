"""A case downloads as JSON Lines that `audit verify --export` checks, carrying no other user's event."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from domain.reset import RequestReset
from infra.audit.export import verify_export
from infra.audit.seal import seal
from infra.console.app import Console
from infra.http.app import create_app
from infra.services.clients import create_client
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.console.support import Browser, sign_in
from tests.support.cli import run_cli
from tests.support.keys import TEST_SIGNING_KEY
from tests.unit.test_audit_chain import offline_check_script



def browser_of(ctx: ServiceContext, **options: object) -> Browser:
    client = Browser(create_app(ctx, console=Console(ctx, **options)))
    sign_in(client, create_client(ctx, "support").api_key)
    return client


@pytest.fixture
def browser(ctx: ServiceContext) -> Iterator[Browser]:
    client = browser_of(ctx, signing_key=lambda: TEST_SIGNING_KEY)
    yield client
    client.close()


def two_users_interleaved(ctx: ServiceContext) -> str:
    first = request_reset(ctx, RequestReset("42", "ada@example.test"))
    request_reset(ctx, RequestReset("7", "bo@example.test"))
    request_reset(ctx, RequestReset("42", "ada@example.test", idempotency_key="again"))
    seal(ctx.engine)
    return str(first.request_id)


def test_a_users_case_downloads_as_an_export_that_audit_verify_accepts(
    ctx: ServiceContext, browser: Browser, tmp_path: Path
) -> None:
    two_users_interleaved(ctx)

    answer = browser.get("/console/case.jsonl?kind=user&id=42")
    path = tmp_path / "case.jsonl"
    path.write_bytes(answer.content)

    assert answer.status_code == 200 and answer.headers["content-type"] == "application/x-ndjson"
    assert "attachment" in answer.headers["content-disposition"]
    check = verify_export(path, TEST_SIGNING_KEY.public_key())
    assert check.ok and check.trusted, check.summary()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    events = [line["event"] for line in lines if line["type"] == "event"]
    assert events and all("reset-user:7" != e["stream_id"] and "7" != e.get("user_id") for e in events)
    assert any(line["type"] == "elided" for line in lines), "user 7's events stand in as hashes"
    assert "bo@example" not in path.read_text() and "ada@example" not in path.read_text()
    verified = run_cli({}, "audit", "verify", "--export", str(path), "--trust-embedded-key")
    assert verified.exit_code == 0, verified.output


def test_an_edited_elided_line_is_found_by_the_check(ctx: ServiceContext, browser: Browser, tmp_path: Path) -> None:
    two_users_interleaved(ctx)
    lines = browser.get("/console/case.jsonl?kind=user&id=42").text.splitlines()
    index = next(i for i, line in enumerate(lines) if '"elided"' in line)
    forged = json.loads(lines[index])
    forged["leaf"] = "00" * 32
    lines[index] = json.dumps(forged)
    path = tmp_path / "forged.jsonl"
    path.write_text("\n".join(lines) + "\n")

    check = verify_export(path, TEST_SIGNING_KEY.public_key())

    assert not check.ok and check.finding is not None and check.finding.kind == "changed"


def test_without_a_signing_key_the_download_is_refused_with_the_reason(ctx: ServiceContext) -> None:
    two_users_interleaved(ctx)
    client = browser_of(ctx)
    try:
        answer = client.get("/console/case.jsonl?kind=user&id=42")
    finally:
        client.close()
    assert answer.status_code == 409 and "no audit signing key" in answer.text


def test_a_case_not_sealed_yet_says_so(ctx: ServiceContext, browser: Browser) -> None:
    request_reset(ctx, RequestReset("42", "ada@example.test"))

    answer = browser.get("/console/case.jsonl?kind=user&id=42")

    assert answer.status_code == 409 and "audit seal" in answer.text


def test_the_documented_offline_script_accepts_a_case_download(
    ctx: ServiceContext, browser: Browser, tmp_path: Path
) -> None:
    two_users_interleaved(ctx)
    script, path = tmp_path / "check.py", tmp_path / "case.jsonl"
    script.write_text(offline_check_script())
    path.write_bytes(browser.get("/console/case.jsonl?kind=user&id=42").content)
    public = base64.b64encode(TEST_SIGNING_KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()

    result = subprocess.run([sys.executable, str(script), str(path), public], capture_output=True, text=True)

    assert result.returncode == 0 and result.stdout.startswith("ok: "), result.stderr
