"""The audit page's services: one background chain verification at a time, with progress; last seal; digest download."""

from __future__ import annotations

import json
import threading

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import Engine, text

from infra.audit import seal as sealer
from infra.audit.background import VerificationRunner, digest_download, seal_state
from infra.audit.digest import parse_digest
from infra.audit.verify import Progress, VerifyReport, verify
from infra.errors import TamperDetected
from tests.support.audit_log import seed, tampering


class Gate:
    """A verify that stops at its last progress report until let go: deterministic, no sleeps."""

    def __init__(self) -> None:
        self.reached, self.release = threading.Event(), threading.Event()
        self.runs = 0
        self._lock = threading.Lock()

    def __call__(self, engine: Engine, progress: Progress) -> VerifyReport:
        with self._lock:
            self.runs += 1

        def held(checked: int) -> None:
            progress(checked)
            self.reached.set()
            assert self.release.wait(30), "the test never let the verification go"

        return verify(engine, progress=held)


def test_a_verification_runs_in_the_background_and_reports_progress_and_the_result(engine: Engine) -> None:
    seed(engine)
    sealer.seal(engine)
    gate = Gate()
    runner = VerificationRunner(engine, verify=gate)
    started = runner.start()
    assert started.running and started.total == 12 and started.checked == 0
    assert gate.reached.wait(30)
    during = runner.status()
    assert during is not None and during.running and during.checked == 12, "events checked / total"
    gate.release.set()
    done = runner.wait(30)
    assert done is not None and done.job_id == started.job_id
    assert done.state == "ok" and done.checked == 12 and done.finished_at is not None
    assert "ok: 12 events match their seals" in (done.summary or "")
    assert done.report is not None and done.report["ok"] is True


def test_a_second_start_while_one_runs_gets_the_running_one_from_any_thread(engine: Engine) -> None:
    seed(engine)
    sealer.seal(engine)
    gate = Gate()
    runner = VerificationRunner(engine, verify=gate)
    barrier = threading.Barrier(8)
    answers: list[object] = []

    def press_the_button() -> None:
        barrier.wait(10)
        answers.append(runner.start().job_id)

    pressers = [threading.Thread(target=press_the_button) for _ in range(8)]
    for thread in pressers:
        thread.start()
    for thread in pressers:
        thread.join(30)
    assert gate.reached.wait(30)
    assert len(answers) == 8 and len(set(answers)) == 1, "one job, whoever asked"
    gate.release.set()
    first = runner.wait(30)
    assert gate.runs == 1, "the chain was read once"
    assert first is not None and first.state == "ok"
    again = runner.start()
    assert again.job_id != first.job_id, "once finished, a new start runs anew"
    gate.release.set()
    assert runner.wait(30).state == "ok" and gate.runs == 2  # type: ignore[union-attr]


def test_a_tampered_log_finishes_as_tampered_naming_the_event(engine: Engine, admin_engine: Engine) -> None:
    seed(engine)
    sealer.seal(engine)
    with tampering(admin_engine) as connection:
        connection.execute(text("UPDATE events SET payload = payload || '{\"flow\": \"otp\"}' "
                                "WHERE global_position = (SELECT min(global_position) FROM events)"))
    runner = VerificationRunner(engine)
    runner.start()
    done = runner.wait(30)
    assert done is not None and done.state == "tampered"
    assert done.summary is not None and done.summary.startswith("TAMPERED")
    assert done.report is not None and done.report["problem"]["kind"]


def test_with_nothing_sealed_the_verification_says_so(engine: Engine) -> None:
    seed(engine, 1)
    runner = VerificationRunner(engine)
    assert runner.status() is None
    runner.start()
    done = runner.wait(30)
    assert done is not None and done.state == "nothing sealed" and done.total == 0
    assert "audit seal" in (done.summary or "")


def test_the_last_seal_is_told_with_its_time_and_the_backlog(engine: Engine) -> None:
    assert seal_state(engine).last_sealed_at is None
    seed(engine, 2)
    sealer.seal(engine)
    seed(engine, 1)
    state = seal_state(engine)
    with engine.connect() as connection:
        newest = connection.execute(text("SELECT max(sealed_at) FROM seals")).scalar_one()
    assert state.last_sealed_at == newest and state.chain_index == 5
    assert state.backlog.sealable == 3
    assert state.as_dict()["unsealed"] == 3


def test_the_digest_download_is_a_signed_digest_of_the_verified_head(engine: Engine, admin_engine: Engine) -> None:
    seed(engine)
    sealer.seal(engine)
    key = Ed25519PrivateKey.generate()
    download = digest_download(engine, key)
    assert download.filename == "authledger-digest-11.json" and download.media_type == "application/json"
    digest = parse_digest(json.loads(download.content), "download")
    assert digest.chain_index == 11
    assert verify(engine, digest=digest).ok
    with tampering(admin_engine) as connection:
        connection.execute(text("DELETE FROM events WHERE global_position = (SELECT max(global_position) FROM events)"))
    try:
        digest_download(engine, key)
    except TamperDetected as refused:
        assert "not signing a broken chain" in str(refused)
    else:
        raise AssertionError("a broken chain must not be signed")
