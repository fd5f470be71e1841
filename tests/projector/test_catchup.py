"""The catch-up runner: wakes on NOTIFY, waits for late commits, and survives being killed mid-batch."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from attrs import evolve
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.pool import NullPool

from domain.log import RecordedEvent
from infra.projector.catchup import CatchUpRunner, catch_up, read_checkpoint
from infra.clock import ManualClock
from infra.projector.registry import projection_named
from infra.services.unit_of_work import ServiceContext
from tests.support.cli import process_env
from tests.support.embedded import fresh_data_dir
from tests.support.replay import assert_projections_match_log
from tests.support.traffic import delivered_emails, some_traffic
from tests.support.waiting import listening, wait_until
from tests.support.wire import at_the_wire

AUTHLEDGER = str(Path(sys.executable).parent / "authledger")


def checkpoint_of(engine: Engine, name: str = "delivery_stats") -> tuple[int, int]:
    with engine.connect() as connection:
        stored = read_checkpoint(connection, name)
    return stored.checkpoint.global_position, stored.events_applied


def sessions_of(engine: Engine, application_name: str) -> int:
    query = text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :name")
    with engine.connect() as connection:
        return connection.execute(query, {"name": application_name}).scalar_one()


class FailsOnThirdBatch:
    """An applier that writes its rows, then dies before the batch's checkpoint moves."""

    def __init__(self, applier: object) -> None:
        self.applier, self.tables, self.batches = applier, applier.tables, 0  # type: ignore[attr-defined]

    def apply(self, connection: Connection, recorded: Sequence[RecordedEvent]) -> int:
        written = self.applier.apply(connection, recorded)  # type: ignore[attr-defined]
        self.batches += 1
        if self.batches == 3:
            raise RuntimeError("killed mid-batch")
        return written

    def forget(self) -> None:
        self.applier.forget()  # type: ignore[attr-defined]


def test_a_runner_failing_mid_batch_resumes_without_loss_or_double_counting(engine: Engine) -> None:
    with engine.begin() as connection:
        delivered_emails(connection, 20)
    stats = projection_named("delivery_stats")
    failing = evolve(stats, applier=FailsOnThirdBatch(stats.applier))

    with pytest.raises(RuntimeError, match="killed mid-batch"):
        CatchUpRunner(engine, [failing], batch_size=7).run_once()

    assert checkpoint_of(engine) == (14, 14), "the two committed batches, not the third"
    with engine.connect() as connection:
        assert connection.execute(text("SELECT sum(attempts) FROM delivery_messages")).scalar_one() == 5
    assert catch_up(engine)["delivery_stats"] == 46
    assert checkpoint_of(engine) == (60, 60)
    assert_projections_match_log(engine, run_catch_up=False)


def test_projections_at_different_checkpoints_catch_up_together_in_one_transaction_a_batch(engine: Engine) -> None:
    stats, audit = projection_named("delivery_stats"), projection_named("audit_index")
    with engine.begin() as connection:
        delivered_emails(connection, 20)
    CatchUpRunner(engine, [audit]).run_once()  # the audit index ahead, as after a rebuild of it alone
    both = CatchUpRunner(engine, [stats, audit], batch_size=25)

    assert both.run_once() == {"delivery_stats": 60, "audit_index": 0}
    assert checkpoint_of(engine, "delivery_stats") == checkpoint_of(engine, "audit_index") == (60, 60)
    with engine.begin() as connection:
        delivered_emails(connection, 5)
    with at_the_wire(engine) as wire:
        assert both.run_once() == {"delivery_stats": 15, "audit_index": 15}
    assert wire.transactions == 1, "one read of the log, folded into both"
    assert_projections_match_log(engine, run_catch_up=False)


@pytest.mark.slow
def test_a_runner_process_killed_with_sigkill_resumes_without_loss_or_double_counting(
    engine: Engine, database_url: str, tmp_path: Path
) -> None:
    with engine.begin() as connection:
        delivered_emails(connection, 1500)
    command = [AUTHLEDGER, "projections", "run", "--batch-size", "10", "--poll-seconds", "0.2"]
    environment = process_env({"DATABASE_URL": database_url, "PGAPPNAME": "runner-to-kill"})
    with (tmp_path / "runner.log").open("w+") as output:
        runner = subprocess.Popen(command, env=environment, stdout=output, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: checkpoint_of(engine)[1] >= 500 or runner.poll() is not None, timeout=60,
                       what="the runner to fold 500 events")
        finally:
            runner.send_signal(signal.SIGKILL)
            runner.wait()
        output.seek(0)
        said = output.read()
    # A COMMIT it sent before dying may still be landing.
    wait_until(lambda: not sessions_of(engine, "runner-to-kill"), what="the killed runner's sessions to end")
    killed_at = checkpoint_of(engine)
    assert 500 <= killed_at[1] < 4500, f"killed part of the way through; the runner said:\n{said}"
    assert_projections_match_log(engine, run_catch_up=False)  # what it committed is whole

    resumed = subprocess.run([AUTHLEDGER, "projections", "run", "--once"], env=environment,
                             capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert f"delivery_stats: {4500 - killed_at[1]} events" in resumed.stdout
    assert checkpoint_of(engine) == (4500, 4500)
    assert_projections_match_log(engine, run_catch_up=False)


def test_the_runner_wakes_on_notify_rather_than_the_poll(engine: Engine) -> None:
    runner = CatchUpRunner(engine, poll_seconds=60)
    thread = threading.Thread(target=runner.run)
    thread.start()
    try:
        wait_until(lambda: listening(engine, "authledger_events"), what="the runner to listen")
        with engine.begin() as connection:
            delivered_emails(connection, 3)
        # Well within the minute's poll: only the notification can have woken it.
        wait_until(lambda: checkpoint_of(engine)[1] == 9, what="the notified runner to fold the three emails")
    finally:
        runner.stop()
        thread.join()


def test_a_runner_whose_listen_connection_is_cut_off_listens_again_and_folds_what_committed_meanwhile(
    engine: Engine, admin_engine: Engine,
) -> None:
    runner = CatchUpRunner(engine, poll_seconds=0.5)
    thread = threading.Thread(target=runner.run)
    thread.start()
    try:
        wait_until(lambda: listening(engine, "authledger_events"), what="the runner to listen")
        with admin_engine.connect() as connection:  # as a failover drops it
            cut = connection.execute(text(
                "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query = 'LISTEN \"authledger_events\"'")).scalars().all()
        assert cut == [True]
        with engine.begin() as connection:  # their NOTIFY reaches no one
            delivered_emails(connection, 3)

        wait_until(lambda: checkpoint_of(engine)[1] == 9, what="the three emails committed meanwhile to be folded")
        wait_until(lambda: listening(engine, "authledger_events"), what="the runner to listen again")
    finally:
        runner.stop()
        thread.join()
    assert_projections_match_log(engine, run_catch_up=False)


@pytest.mark.slow
def test_a_burst_of_commits_is_folded_in_one_pass_not_one_per_commit(engine: Engine) -> None:
    with engine.begin() as connection:  # before the runner starts: its first pass folds it whole
        delivered_emails(connection, 1)
    runner = CatchUpRunner(engine, poll_seconds=60, gather_seconds=2.0)
    thread = threading.Thread(target=runner.run)
    thread.start()
    try:
        wait_until(lambda: runner.passes == 1, what=lambda: f"the first pass: checkpoint {checkpoint_of(engine)}")
        for _ in range(3):  # three requests' commits, each notifying, apart but well within the gathering
            with engine.begin() as connection:
                delivered_emails(connection, 1)
            time.sleep(0.2)  # long enough for a runner without gathering to fold each alone
        wait_until(lambda: checkpoint_of(engine)[1] == 12,
                   what=lambda: f"the burst to be folded: checkpoint {checkpoint_of(engine)}, passes {runner.passes}")
    finally:
        runner.stop()
        thread.join()  # every pass that folded is counted by now
    assert runner.passes == 2


def test_an_event_that_commits_late_is_folded_in_its_place_not_skipped(
    engine: Engine, ctx: ServiceContext, clock: ManualClock
) -> None:
    some_traffic(ctx, clock, users=2)
    catch_up(engine)
    with engine.connect() as late:
        # Appended, not yet committed: a smaller xid than what follows. (Other users: a
        # user's first event creates their data key, which the open transaction would hold.)
        delivered_emails(late, 1, users="late")
        with engine.begin() as connection:
            delivered_emails(connection, 2)
        catch_up(engine)
        held = checkpoint_of(engine)
        with engine.connect() as connection:
            committed = connection.execute(text("SELECT max(global_position) FROM events")).scalar_one()
        assert held[0] < committed, "the runner waits behind the open transaction"
        late.commit()
    catch_up(engine)
    assert checkpoint_of(engine)[1] == held[1] + 9
    assert_projections_match_log(engine, run_catch_up=False)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_runner_asked_to_stop_says_stopped_and_logs_no_lost_connection(signum: int) -> None:
    """On the embedded default, where the process that stops also stops the server under it."""
    with fresh_data_dir() as data_dir:
        stop_a_runner_on_the_embedded_default(data_dir, signum)


def stop_a_runner_on_the_embedded_default(data_dir: Path, signum: int) -> None:
    runner_err = data_dir.parent / "runner.err"
    environment = process_env({"DATABASE_URL": None, "AUTHLEDGER_DATA_DIR": str(data_dir),
                               "AUTHLEDGER_LOG_FORMAT": "json"})
    subprocess.run([AUTHLEDGER, "db", "init"], env=environment, check=True, capture_output=True, timeout=120)
    with runner_err.open("w+") as errors:
        runner = subprocess.Popen([AUTHLEDGER, "projections", "run", "--poll-seconds", "0.2"], env=environment,
                                  stdout=subprocess.PIPE, stderr=errors, text=True)

        def started() -> bool:
            assert runner.poll() is None, runner_err.read_text()
            return "catch-up runner started" in runner_err.read_text()

        wait_until(started, timeout=60, what="the runner to start")
        # Through the server's socket, as a visitor: joining the embedded server would keep it up past the runner.
        socket_dir = data_dir / "pgdata"
        server = create_engine(f"postgresql+psycopg://postgres@/postgres?host={socket_dir}", poolclass=NullPool)
        try:
            wait_until(lambda: listening(server, "authledger_events"), what="the runner to listen")
        finally:
            server.dispose()
        runner.send_signal(signum)
        out, _ = runner.communicate(timeout=30)
        errors.seek(0)
        logged = [json.loads(line) for line in errors.read().splitlines()]
    assert runner.returncode == 0
    assert out == "stopped; folded delivery_stats: 0 events, audit_index: 0 events\n"
    assert [line["event"] for line in logged] == ["catch-up runner started", "catch-up runner stopped"], logged
