"""RFC 3464 bounce reports read from a Maildir: matched to their email, recorded once, bad files set aside."""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

import pytest

from domain.errors import InvalidInput
from infra.feedback.dsn import read_report
from tests.feedback.support import explained, sent_reset
from infra.services.unit_of_work import ServiceContext
from tests.http.support import log_size
from tests.support.cli import Env, cli_outcome

FIXTURES = Path(__file__).parent.parent / "fixtures" / "feedback"


def report(name: str, message_id: UUID) -> bytes:
    return (FIXTURES / name).read_bytes().replace(b"{message_id}", str(message_id).encode())


def maildir(tmp_path: Path, **files: bytes) -> Path:
    box = tmp_path / "bounces"
    for folder in ("new", "cur", "tmp"):
        (box / folder).mkdir(parents=True)
    for name, content in files.items():
        (box / "new" / name).write_bytes(content)
    return box


def test_a_permanent_bounce_report_is_told_suppresses_and_is_read_once(
    ctx: ServiceContext, env: Env, tmp_path: Path,
) -> None:
    message_id = sent_reset(ctx, "42", "ada@example.test")
    box = maildir(tmp_path, **{"1764898800.M1P1.mx": report("dsn_permanent.eml", message_id),
                               "1764898801.M2P1.mx": b"Subject: hello\r\n\r\nnot a report at all\r\n"})

    code, out = cli_outcome(env, "bounces", "ingest", "--maildir", str(box))
    size = log_size(ctx.engine)
    again, out_again = cli_outcome(env, "bounces", "ingest", "--maildir", str(box))

    assert code == 0, out
    assert "1 report(s) recorded" in out and "1764898801.M2P1.mx: not a delivery status notification" in out
    assert sorted(p.name for p in (box / "cur").iterdir()) == ["1764898800.M1P1.mx:2,S", "1764898801.M2P1.mx:2,F"]
    assert (again, log_size(ctx.engine)) == (0, size), out_again
    told = explained(ctx, message_id)
    assert any("bounced for good" in s and "bounce report (RFC 3464)" in s and "5.1.1" in s for s in told), told
    code, refused = cli_outcome(env, "reset", "request", "--user-id", "7", "--email", "ada@example.test")
    assert code == 14 and "suppression list" in refused

    code, out = cli_outcome(env, "suppressions", "lift", "ada@example.test", "--reason", "ticket 3: mailbox fixed")
    assert code == 0 and "lifted 1" in out, out
    code, out = cli_outcome(env, "reset", "request", "--user-id", "7", "--email", "ada@example.test")
    assert code == 0, out


def test_a_delayed_report_is_a_transient_bounce_and_suppresses_nothing(ctx: ServiceContext) -> None:
    message_id = sent_reset(ctx, "42", "ada@example.test")

    ref, feedback = read_report(report("dsn_delayed.eml", message_id))

    assert ref.message_id == message_id
    assert (feedback.kind, feedback.permanent, feedback.suppresses) == ("bounce", False, False)
    assert feedback.diagnostic.startswith("4.2.2 smtp; 452 4.2.2")


def test_a_report_without_the_headers_is_matched_by_its_verp_address() -> None:
    message_id = UUID("0190a5c8-0000-7000-8000-000000000001")
    raw = report("dsn_permanent.eml", message_id).replace(
        f"Message-ID: <{message_id}@authledger>".encode(), b"Message-ID: <other@relay.test>").replace(
        b"To: no-reply@app.test", f"To: bounces+{message_id}@app.test".encode())

    ref, feedback = read_report(raw)

    assert (ref.message_id, feedback.kind, feedback.permanent) == (message_id, "bounce", True)


@pytest.mark.parametrize("raw", [
    b"",
    b"Content-Type: multipart/report; report-type=disposition-notification; boundary=x\r\n\r\n--x--\r\n",
    b"Content-Type: multipart/report; report-type=delivery-status; boundary=x\r\n\r\n--x--\r\n",
])
def test_what_is_no_delivery_status_report_is_refused_by_name(raw: bytes) -> None:
    with pytest.raises(InvalidInput):
        read_report(raw)


def test_a_folder_that_is_no_maildir_exits_with_the_input_code(env: Env, tmp_path: Path) -> None:
    code, out = cli_outcome(env, "bounces", "ingest", "--maildir", str(tmp_path / "nothing"))
    assert code == 2 and "is not a Maildir" in out


def test_the_watcher_serve_runs_reads_a_report_that_arrives_while_it_runs(
    ctx: ServiceContext, tmp_path: Path,
) -> None:
    import threading

    from infra.feedback.bounce_mailbox import BounceMailboxWatcher
    from infra.services.suppressions import list_suppressions
    from tests.support.waiting import wait_until

    message_id = sent_reset(ctx, "42", "ada@example.test")
    box = maildir(tmp_path)
    watcher = BounceMailboxWatcher(ctx, box, interval_seconds=0.05)
    thread = threading.Thread(target=watcher.run)
    thread.start()
    try:
        (box / "tmp" / "r1").write_bytes(report("dsn_permanent.eml", message_id))
        (box / "tmp" / "r1").rename(box / "new" / "r1")  # as an MDA delivers: written in tmp/, moved to new/
        wait_until(lambda: (box / "cur" / "r1:2,S").exists(), what="the report read and moved to cur/")
    finally:
        watcher.stop()
        thread.join()
    assert [s.user_id for s in list_suppressions(ctx, "default")] == ["42"]
