"""A database made by the last release (065974c, schema version 3) keeps working after `db init`.

The old database is made by the old code itself, not by a hand-written
imitation: the release's code, frozen in tests/fixtures with `git archive`,
is unpacked and its CLI runs against a fresh database of the test's PostgreSQL
(db init, a client, a reset link, a code, delivery into a Maildir, from which
the test reads the link and the code as the user would). Then today's code
upgrades it with `db init`, twice, and the old key, link and code work over
HTTP through a real server; `projections verify` passes, and `audit verify`
checks the old release's hash chain extended by today's seals.
"""

from __future__ import annotations

import json
import mailbox
import os
import subprocess
import tarfile
import sys
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from domain.clients import LEGACY_SCOPES
from infra.clock import ManualClock
from infra.db.engine import Database
from infra.db.schema import SCHEMA_VERSION
from infra.services.clients import authenticate
from infra.services.unit_of_work import ServiceContext
from tests.support.keys import TEST_KEYS, TOKEN_KEYS_SETTING
from tests.support.replay import assert_projections_match_log
from infra.http.app import create_app
from tests.support.servers import served

TODAY = Path(__file__).resolve().parents[2]  # this checkout's code
# The last release before tenants and scoped keys (065974c, schema version 3).
LAST_RELEASE_CODE = Path(__file__).resolve().parents[1] / "fixtures" / "release-065974c.tar.gz"
RESET_URL = "https://app.test/reset"
pytestmark = pytest.mark.slow
OLD_REQUESTS = text("""
    SELECT event_type, payload ? 'nonce' AS has_nonce FROM events
     WHERE event_type IN ('ResetRequested', 'OtpChallengeIssued')
""")


@pytest.fixture(scope="module")
def last_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The last release's code, unpacked from its frozen copy in tests/fixtures.

    A frozen copy (``git archive 065974c domain projections infra commands
    cli.py schema.sql``) rather than the git history: a shallow clone, as CI
    may make, holds no old commit, and the upgrade must be proven anyway.
    """
    target = tmp_path_factory.mktemp("last-release")
    with tarfile.open(LAST_RELEASE_CODE) as archive:
        archive.extractall(target, filter="data")
    assert (target / "cli.py").exists()
    return target


@pytest.fixture
def empty_database(pg_server: Engine) -> Iterator[str]:
    """The libpq URL of a database with nothing in it: no schema, unlike the usual test database."""
    name = f"old_{uuid.uuid4().hex[:16]}"
    with pg_server.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(pg_server.url).set(database=name).render_as_string(hide_password=False)
    yield url.replace("postgresql+psycopg://", "postgresql://", 1)
    with pg_server.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def env(empty_database: str, tmp_path: Path) -> dict[str, str]:
    return {
        **{name: value for name, value in os.environ.items() if not name.startswith("AUTHLEDGER_")},
        "AUTHLEDGER_MASTER_KEY": os.environ["AUTHLEDGER_MASTER_KEY"],
        "DATABASE_URL": empty_database,
        "AUTHLEDGER_TOKEN_KEYS": TOKEN_KEYS_SETTING,
        "AUTHLEDGER_DATA_DIR": str(tmp_path / "data"),
        "AUTHLEDGER_MAILDIR": str(tmp_path / "maildir"),
        "AUTHLEDGER_RESET_URL": RESET_URL,
    }


def authledger(code: Path, env: dict[str, str], *args: str) -> str:
    """The CLI of the code in ``code`` (its own modules first on the path), run to success; its stdout."""
    run = subprocess.run([sys.executable, "-c", "import cli; cli.main()", *args], cwd=code,
                         env={**env, "PYTHONPATH": str(code)}, capture_output=True, text=True, check=False)
    assert run.returncode == 0, (args, run.stdout, run.stderr)
    return run.stdout


def mail_in(maildir: Path) -> list[str]:
    bodies = []
    for message in mailbox.Maildir(maildir, create=False):
        part = next(p for p in message.walk() if p.get_content_type() == "text/plain")
        bodies.append(part.get_payload(decode=True).decode())
    return bodies


def test_a_database_of_the_last_release_is_upgraded_by_db_init_and_its_key_link_and_code_still_work(
    last_release: Path, env: dict[str, str], empty_database: str, tmp_path: Path
) -> None:
    old = partial(authledger, last_release, env)
    assert json.loads(old("db", "init", "--json"))["version"] == 3
    api_key = json.loads(old("clients", "create", "legacy-app", "--json"))["api_key"]
    reset = json.loads(old("reset", "request", "--user-id", "42", "--email", "ada@example.com", "--json"))
    challenge = json.loads(old("otp", "request", "--user-id", "42", "--email", "ada@example.com",
                               "--purpose", "mfa", "--json"))
    old("worker", "--once")
    old("audit", "seal")  # the old release's hash chain, which today's code must extend and verify
    [link_mail] = [body for body in mail_in(tmp_path / "maildir") if "token=" in body]
    [code_mail] = [body for body in mail_in(tmp_path / "maildir") if "token=" not in body]
    link = next(line for line in link_mail.splitlines() if line.startswith(RESET_URL))
    token = parse_qs(urlsplit(link).query)["token"][0]
    code = next(line.strip() for line in code_mail.splitlines() if line.strip().isdigit())

    new = partial(authledger, TODAY, env)
    upgraded = json.loads(new("db", "init", "--json"))
    again = json.loads(new("db", "init", "--json"))

    assert upgraded["upgraded_from"] == 3 and upgraded["version"] == SCHEMA_VERSION
    assert again["already_initialised"] and again["upgraded_from"] is None
    database = Database(empty_database.replace("postgresql://", "postgresql+psycopg://", 1))
    engine = database.engine()
    try:
        with engine.connect() as connection:
            made = connection.execute(OLD_REQUESTS).all()
        assert len(made) == 2 and not any(row.has_nonce for row in made), "made before nonces: derivation 1"
        caller = authenticate(engine, api_key)
        assert caller is not None and caller.client == "legacy-app" and caller.tenant == "default"
        assert caller.scopes == LEGACY_SCOPES
        ctx = ServiceContext(engine=engine, keys=TEST_KEYS,
                             clock=ManualClock(), reset_url=RESET_URL)
        with served(create_app(ctx)) as base, httpx.Client(base_url=base, timeout=30,
                                               headers={"Authorization": f"Bearer {api_key}"}) as api:
            verify_path = f"/v1/otp/challenges/{challenge['challenge_id']}/verify"
            other_purpose = api.post(verify_path, json={"code": code, "user_id": "42", "purpose": "login"})
            assert other_purpose.status_code == 400, "a code of another purpose is answered as unknown"
            assert api.post(verify_path, json={"code": code, "user_id": "42", "purpose": "mfa"}).json() == {
                "verified": True, "challenge_id": challenge["challenge_id"]}
            verified = api.post("/v1/password-resets/verify", json={"token": token})
            assert verified.status_code == 200 and verified.json()["request_id"] == reset["request_id"]
            consumed = api.post("/v1/password-resets/consume", json={"token": token})
            assert consumed.status_code == 200 and consumed.json()["user_id"] == "42"
            timeline = api.get("/v1/timeline", params={"user_id": "42"})
            assert timeline.status_code == 200 and "ada@example.com" in timeline.text  # review is a legacy scope
            assert api.get("/v1/admin/clients").status_code == 403 and api.get("/metrics").status_code == 403
        new("projections", "verify")
        new("audit", "seal")
        new("audit", "verify")
        assert_projections_match_log(engine)
    finally:
        engine.dispose()
