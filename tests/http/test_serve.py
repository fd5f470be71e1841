"""`authledger serve` as a real process: HTTP in, email out, the secret back in, clean shutdown."""

from __future__ import annotations

import json
import mailbox
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from email.message import Message
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from sqlalchemy import Engine, text

from domain.counting import BOUND_KEYS_PER_WINDOW, RequestsCounted
from domain.reset import RequestReset
from domain.reset_events import reset_stream
from infra.bootstrap import App
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from infra.config.settings import Settings
from infra.db.engine import Database
from domain.clients import SCOPES
from infra.services.clients import authenticate, create_client, revoke_client
from infra.http.serve import API_POOL_SIZE, CONNECTIONS_ALLOWED, ensure_dev_key
from tests.console.support import csrf_of
from tests.support.cli import Env, process_env
from tests.support.log_reading import stream_events
from tests.support.servers import AUTHLEDGER, free_port, start_serve
from tests.support.waiting import wait_until



def client_of(engine: Engine, api_key: str) -> str | None:
    caller = authenticate(engine, api_key)
    return caller and caller.client



@pytest.fixture
def env(env: Env, tmp_path: Path) -> dict[str, str]:
    """Whole, for the processes these tests start: the shared settings, a data folder and a one-second poll."""
    return process_env({**env, "AUTHLEDGER_DATA_DIR": str(tmp_path / "data"), "AUTHLEDGER_POLL_SECONDS": "1"})


@pytest.fixture
def server(env: dict[str, str], tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    process, base = start_serve(env, tmp_path, "--inflight", "8")
    yield process, base
    if process.poll() is None:
        process.kill()
        process.wait()


def emails(env: dict[str, str], count: int) -> list[Message] | None:
    box = Path(env["AUTHLEDGER_MAILDIR"])
    found = list(mailbox.Maildir(box, create=False)) if (box / "new").exists() else []
    return found if len(found) >= count else None


def text_of(message: Message) -> str:
    part = next(p for p in message.walk() if p.get_content_type() == "text/plain")
    return part.get_payload(decode=True).decode()


@pytest.mark.slow
def test_serve_takes_requests_delivers_mail_and_stops_cleanly_on_sigterm(
    env: dict[str, str], server: tuple[subprocess.Popen[bytes], str], tmp_path: Path
) -> None:
    process, base = server
    created = subprocess.run([AUTHLEDGER, "clients", "create", "e2e", "--scope", "send", "--scope", "verify",
                              "--json"], env=env, capture_output=True, text=True, check=True)
    headers = {"Authorization": f"Bearer {json.loads(created.stdout)['api_key']}"}
    scraper = subprocess.run([AUTHLEDGER, "clients", "create", "prometheus", "--scope", "operator", "--json"],
                             env=env, capture_output=True, text=True, check=True)
    scrape = httpx.Client(base_url=base, timeout=10,
                          headers={"Authorization": f"Bearer {json.loads(scraper.stdout)['api_key']}"})
    assert httpx.get(f"{base}/metrics", timeout=10).status_code == 401  # no key: no counters

    with httpx.Client(base_url=base, headers=headers, timeout=10) as api:
        reset = api.post("/v1/password-resets", json={"user_id": "42", "email": "ada@example.com"},
                         headers={"Idempotency-Key": "e2e-reset"})
        challenge = api.post("/v1/otp/challenges", json={"user_id": "42", "email": "ada@example.com"},
                             headers={"Idempotency-Key": "e2e-otp"})
        assert (reset.status_code, challenge.status_code) == (202, 202), reset.text + challenge.text

        by_id = {m["Message-ID"]: m for m in wait_until(lambda: emails(env, 2), what="two emails")}
        link_mail = by_id[f"<{reset.json()['message_id']}@authledger>"]
        code_mail = by_id[f"<{challenge.json()['message_id']}@authledger>"]
        assert link_mail["To"] == code_mail["To"] == "ada@example.com"
        link = next(line for line in text_of(link_mail).splitlines() if line.startswith("https://app.test/reset?"))
        token = parse_qs(urlsplit(link).query)["token"][0]
        code = next(line.strip() for line in text_of(code_mail).splitlines() if line.strip().isdigit())

        assert api.post("/v1/password-resets/verify", json={"token": token}).json()["valid"] is True
        assert api.get("/reset", params={"token": token}).status_code == 404, "with DATABASE_URL: no stand-in page"
        consumed = api.post("/v1/password-resets/consume", json={"token": token})
        assert consumed.status_code == 200 and consumed.json()["request_id"] == reset.json()["request_id"]
        verified = api.post(f"/v1/otp/challenges/{challenge.json()['challenge_id']}/verify",
                            json={"code": code, "user_id": "42"})
        assert verified.status_code == 200 and verified.json()["verified"] is True

        wait_until(lambda: emails(env, 3), what="the password-changed notice")

        # The Maildir file lands before the worker records ProviderAccepted, so "sent" trails the mail.
        def all_three_sent() -> bool | None:
            return True if 'authledger_outbox_messages{state="sent"} 3' in scrape.get("/metrics").text else None

        wait_until(all_three_sent, what="the three deliveries to be recorded as sent")

        def caught_up() -> bool | None:  # serve runs the catch-up runner beside the API and the worker
            lags = [line for line in scrape.get("/metrics").text.splitlines()
                    if line.startswith("authledger_projection_lag_events{")]
            return True if lags and all(line.endswith(" 0") for line in lags) else None

        wait_until(caught_up, what="the catch-up projections to follow the log")
        scrape.close()

    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=15) == 0
    log = [json.loads(line) for line in (tmp_path / "serve.err").read_text().splitlines() if line.startswith("{")]
    events = [line["event"] for line in log]
    assert "worker stopped" in events and events.index("worker stopped") > events.index("Shutting down")
    assert token not in (tmp_path / "serve.err").read_text()
    said = (tmp_path / "serve.out").read_text()
    assert f"mail: delivered to the Maildir {Path(env['AUTHLEDGER_MAILDIR']).resolve()}" in said
    assert "development API key" not in said, "only the embedded default makes a development key"


@pytest.mark.slow
def test_serve_writes_the_count_of_a_flood_whose_hour_closed_before_it_started(
    env: dict[str, str], ctx: ServiceContext, engine: Engine, tmp_path: Path
) -> None:
    ctx.clock.advance(timedelta(hours=-3))  # type: ignore[attr-defined] - the fixture's clock is a ManualClock
    # A request, then repeats within its cooldown, each with a new key: the first ones bind it, the rest are counted.
    for n in range(1 + BOUND_KEYS_PER_WINDOW + 14):
        request_reset(ctx, RequestReset("flooded", "ada@example.com", idempotency_key=f"k-{n}"))
    process, _ = start_serve(env, tmp_path, "--inflight", "0")
    try:
        def counted() -> RequestsCounted | None:
            last = stream_events(engine, reset_stream("flooded"))[-1]
            return last if isinstance(last, RequestsCounted) else None

        assert wait_until(counted, what="serve to write the flood's count").count == 14
        with engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM request_counts")).scalar_one() == 0
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    assert '"closed counts written"' in (tmp_path / "serve.err").read_text()


@pytest.mark.slow
def test_on_the_embedded_default_serve_initialises_the_database_and_prints_a_development_key(
    tmp_path: Path, embedded_data_dir: Path
) -> None:
    port, data_dir = free_port(), embedded_data_dir
    env = process_env({"DATABASE_URL": None, "AUTHLEDGER_TOKEN_KEYS": None})
    env.update({"AUTHLEDGER_DATA_DIR": str(data_dir), "AUTHLEDGER_LOG_FORMAT": "json"})
    with (tmp_path / "serve.out").open("wb") as out, (tmp_path / "serve.err").open("wb") as err:
        process = subprocess.Popen([AUTHLEDGER, "serve", "--port", str(port)], env=env, stdout=out, stderr=err)
    try:
        base = f"http://127.0.0.1:{port}"

        def up() -> bool | None:
            assert process.poll() is None, (tmp_path / "serve.err").read_text()
            try:
                return httpx.get(f"{base}/readyz", timeout=1).status_code == 200 or None
            except httpx.TransportError:
                return None

        wait_until(up, what="the embedded server", timeout=90)
        key_file = data_dir / "dev-api-key"
        key = key_file.read_text().strip()
        assert key_file.stat().st_mode & 0o777 == 0o600
        said = (tmp_path / "serve.out").read_text()
        assert key in said and "for local use only" in said
        assert f"Maildir {(data_dir / 'maildir').resolve()}" in said
        assert f"development reset page (a stand-in for your application's): {base}/reset" in said
        assert httpx.get(f"{base}/reset").status_code == 400, "the default reset link's page exists"
        assert httpx.get(f"{base}/docs").status_code == 200

        answer = httpx.post(f"{base}/v1/otp/challenges", json={"user_id": "1", "email": "dev@example.com"},
                            headers={"Authorization": f"Bearer {key}", "Idempotency-Key": "dev-1"})
        assert answer.status_code == 202, answer.text
        wait_until(lambda: list((data_dir / "maildir" / "new").glob("*")) or None, what="the code's email")
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def test_the_development_key_is_kept_and_replaced_once_it_stops_working(
    database: Database, engine: Engine, tmp_path: Path
) -> None:
    app = App(Settings(data_dir=tmp_path), database=database)
    try:
        key, path = ensure_dev_key(app)
        assert ensure_dev_key(app) == (key, path), "the same key on every start"
        revoke_client(app.services, "dev")
        new_key, _ = ensure_dev_key(app)
        path.write_text("alk_lost")
        newest, _ = ensure_dev_key(app)
    finally:
        app.close()
    assert len({key, new_key, newest}) == 3
    assert client_of(engine, newest) == "dev" and client_of(engine, new_key) is None
    assert path.read_text().strip() == newest and path.stat().st_mode & 0o777 == 0o600
    kinds = [type(e).__name__ for e in stream_events(engine, "client:dev")]
    assert kinds == ["ClientKeyIssued", "ClientKeyRevoked", "ClientKeyIssued", "ClientKeyRevoked", "ClientKeyIssued"]
    caller = authenticate(engine, newest)
    assert caller is not None and caller.scopes == frozenset(SCOPES) and caller.tenant == "default"


def test_a_development_key_from_before_scopes_is_replaced_by_one_with_every_scope(
    database: Database, engine: Engine, tmp_path: Path
) -> None:
    app = App(Settings(data_dir=tmp_path), database=database)
    try:
        old = create_client(app.services, "dev").api_key  # what serve made before scopes: send, verify, review
        (tmp_path / "dev-api-key").write_text(old + "\n")
        key, _ = ensure_dev_key(app)
    finally:
        app.close()
    assert key != old and authenticate(engine, old) is None
    assert authenticate(engine, key).scopes == frozenset(SCOPES)


def start_processes(env: dict[str, str], tmp_path: Path, processes: int) -> tuple[subprocess.Popen[bytes], str]:
    return start_serve(env, tmp_path, "--inflight", "8", "--processes", str(processes))


def api_processes(tmp_path: Path, count: int) -> list[int] | None:
    """The API processes' pids, in order, from the supervisor's log lines; None until all are there."""
    lines = [json.loads(line) for line in (tmp_path / "serve.err").read_text().splitlines() if line.startswith("{")]
    pids = [line["pid"] for line in lines if line["event"] == "api process started"]
    return pids if len(pids) == count else None


@contextmanager
def stopped(pid: int) -> Iterator[None]:
    """``pid`` stopped meanwhile: only the other API process answers."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@contextmanager
def answered_by_the_running_process(base: str, **options: object) -> Iterator[httpx.Client]:
    """A client whose keep-alive connection the running API process accepted, the other being stopped.

    The kernel hashes each new connection to one process's socket
    (SO_REUSEPORT): one that lands on the stopped process waits, so it is
    dropped and another is opened, until one is answered.
    """
    for _ in range(50):  # each lands on the running process one time in two
        client = httpx.Client(base_url=base, timeout=10, **options)  # type: ignore[arg-type]
        try:
            answered = client.get("/healthz", timeout=0.5).status_code == 200
        except httpx.TimeoutException:
            answered = False
        if answered:
            try:
                yield client
            finally:
                client.close()
            return
        client.close()
    raise AssertionError("no connection reached the running API process")


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.slow
def test_serve_with_two_processes_answers_from_each_delivers_from_one_and_stops_all_on_sigterm(
    env: dict[str, str], tmp_path: Path
) -> None:
    process, base = start_processes(env, tmp_path, 2)
    try:
        first, second = wait_until(lambda: api_processes(tmp_path, 2), what="both API processes")
        created = subprocess.run([AUTHLEDGER, "clients", "create", "e2e", "--scope", "send", "--json"],
                                 env=env, capture_output=True, text=True, check=True)
        headers = {"Authorization": f"Bearer {json.loads(created.stdout)['api_key']}"}
        # With one process stopped, only the other answers: each answers a create alone in turn.
        for answering, other in ((first, second), (second, first)):
            with stopped(other), answered_by_the_running_process(base, headers=headers) as api:
                answer = api.post("/v1/password-resets", json={"user_id": str(answering), "email": "ada@example.com"},
                                  headers={"Idempotency-Key": f"from-{answering}"})
            assert answer.status_code == 202, answer.text
        wait_until(lambda: emails(env, 2), what="both emails, sent by the first process's worker")
        # A reviewer signed in by the first process stays signed in when the second answers.
        reviewer = subprocess.run([AUTHLEDGER, "clients", "create", "reviewer", "--scope", "review", "--json"],
                                  env=env, capture_output=True, text=True, check=True)
        with stopped(second), answered_by_the_running_process(base) as browser:
            form = browser.get("/console/sign-in")
            signed_in = browser.post("/console/sign-in", data={
                "csrf": csrf_of(form), "api_key": json.loads(reviewer.stdout)["api_key"]})
            cookies = browser.cookies
        with stopped(first), answered_by_the_running_process(base, cookies=cookies) as browser:
            page = browser.get("/console/")
            found = browser.post("/console/search", data={"csrf": csrf_of(page), "q": str(first)})
        assert signed_in.headers["location"] == "/console/" and page.status_code == 200, page.text
        assert found.headers["location"] == f"/console/case?kind=user&id={first}", found.text
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=90)
    assert code == 0
    assert gone(first) and gone(second), "the supervisor waits for its API processes"
    log = [json.loads(line) for line in (tmp_path / "serve.err").read_text().splitlines() if line.startswith("{")]
    assert sum(line["event"] == f"Finished server process [{pid}]" for line in log for pid in (first, second)) == 2
    assert [line["event"] for line in log].count("worker started") == 1, "one delivery window, not one per process"
    assert "processes: 2 API processes" in (tmp_path / "serve.out").read_text()


@pytest.mark.slow
def test_serve_runs_as_many_api_processes_as_the_environment_says_unless_the_command_line_says_otherwise(
    env: dict[str, str], tmp_path: Path
) -> None:
    env = {**env, "AUTHLEDGER_API_PROCESSES": "2"}
    for told, expected in (((), 2), (("--processes", "1"), 0)):
        process, _ = start_serve(env, tmp_path, "--inflight", "0", *told)
        try:
            if expected:
                wait_until(lambda: api_processes(tmp_path, expected), what="both API processes")
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=90) == 0
        said, log = (tmp_path / "serve.out").read_text(), (tmp_path / "serve.err").read_text()
        assert log.count('"api process started"') == expected, log
        assert ("processes: 2 API processes" in said) == bool(expected), said


def test_serve_refuses_more_api_processes_than_the_database_has_connections_for_and_writes_nothing(
    env: dict[str, str], engine: Engine
) -> None:
    with engine.connect() as connection:
        allowed = connection.execute(CONNECTIONS_ALLOWED).scalar_one()
        events = connection.execute(text("SELECT count(*) FROM events")).scalar_one()
    too_many = allowed // API_POOL_SIZE + 1
    if too_many > 64:  # --processes takes 1-64: a TEST_DATABASE_URL server this large leaves nothing to refuse
        pytest.skip(f"the database allows {allowed} connections, room for more than 64 processes")

    refused = subprocess.run([AUTHLEDGER, "serve", "--port", str(free_port()), "--processes", str(too_many),
                              "--inflight", "0"], env=env, capture_output=True, text=True, timeout=60)

    assert refused.returncode == 78, refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == (
        f"Error: {too_many} API processes would keep up to {too_many * API_POOL_SIZE} database connections "
        f"({API_POOL_SIZE} each), and the database allows {allowed} (max_connections, less those reserved for "
        f"superusers): run at most {too_many - 1} (--processes or AUTHLEDGER_API_PROCESSES)")
    assert "Traceback" not in refused.stderr and "api process started" not in refused.stderr
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM events")).scalar_one() == events


@pytest.mark.slow
def test_when_one_api_process_dies_serve_stops_the_others_and_exits_with_an_error(
    env: dict[str, str], tmp_path: Path
) -> None:
    process, _ = start_processes(env, tmp_path, 2)
    try:
        first, second = wait_until(lambda: api_processes(tmp_path, 2), what="both API processes")
        os.kill(second, signal.SIGKILL)
        code = process.wait(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert code == 70
    assert gone(first)
    said = (tmp_path / "serve.err").read_text()
    assert f"API process 1 (pid {second}) exited with -9; the others were stopped" in said
    assert "Traceback" not in said


@pytest.mark.parametrize("processes", ["1", "2"])
def test_serve_refuses_a_port_in_use_even_by_another_serve(env: dict[str, str], processes: str) -> None:
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # as an API process binds it
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = subprocess.run(
            [AUTHLEDGER, "serve", "--port", str(port), "--processes", processes, "--inflight", "0"],
            env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 69, refused.stderr
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in refused.stderr
    assert "Traceback" not in refused.stderr
