"""`authledger users invalidate` and `users resend`: support actions from the command line, on the record.

Exit codes as every command's (docs/exit-codes.md): 0 done, 2 bad input, 3
not found; on bad input nothing is written. `history` then tells what
support did, who and why.
"""

from __future__ import annotations

import json
import mailbox

import pytest
from sqlalchemy import Engine, text

from domain.reset_events import ResetInvalidated, reset_stream
from tests.support.cli import Env, cli_outcome
from tests.support.log_reading import stream_events
from tests.support.replay import assert_projections_match_log

ADA = "ada@example.test"
REASON = "ticket 4711"


def log_size(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(text("SELECT count(*) FROM events")).scalar_one()


@pytest.fixture
def ada(env: Env) -> None:
    code, out = cli_outcome(env, "reset", "request", "--user-id", "42", "--email", ADA)
    assert code == 0, out


def test_invalidate_withdraws_the_open_link_and_history_tells_who_and_why(
    ada: None, env: Env, engine: Engine
) -> None:
    code, out = cli_outcome(env, "users", "invalidate", "--user-id", "42", "--reason", REASON, "--actor", "alice")

    assert (code, out.strip()) == (0, "withdrew 1 reset link(s) and 0 code(s) of user 42")
    assert [e.reason for e in stream_events(engine, reset_stream("42")) if isinstance(e, ResetInvalidated)] == [REASON]
    code, told = cli_outcome(env, "history", "--user-id", "42")
    assert code == 0
    assert "was invalidated by support (cli:alice) at" in told
    assert f"because {REASON}; its link or code stopped working then" in told
    assert "link withdrawn by support (ticket 4711)" in told  # the timeline's line
    assert_projections_match_log(engine)


def test_invalidate_a_user_with_nothing_open_changes_nothing_and_says_so(env: Env, engine: Engine) -> None:
    code, out = cli_outcome(env, "users", "invalidate", "--user-id", "nobody", "--reason", REASON, "--json")

    assert code == 0
    assert json.loads(out) == {"user_id": "nobody", "tenant": "default", "invalidated_links": 0,
                               "invalidated_codes": 0, "request_ids": [], "challenge_ids": []}
    assert log_size(engine) == 0


@pytest.mark.parametrize("args, exit_code", [
    (["--reason", ""], 2),
    (["--reason", "mail ada@example.test back"], 2),
    (["--reason", REASON, "--actor", "ada@example.test"], 2),
    (["--reason", REASON, "--tenant", "no-such-tenant"], 2),
    ([], 2),
])
def test_invalidate_refuses_bad_input_and_writes_nothing(
    ada: None, env: Env, engine: Engine, args: list[str], exit_code: int
) -> None:
    before = log_size(engine)

    code, out = cli_outcome(env, "users", "invalidate", "--user-id", "42", *args)

    assert code == exit_code, out
    assert "Traceback" not in out
    assert log_size(engine) == before


def test_resend_queues_a_fresh_link_to_the_latest_address_and_history_says_support_sent_it(
    ada: None, env: Env
) -> None:
    cli_outcome(env, "users", "invalidate", "--user-id", "42", "--reason", REASON)

    code, out = cli_outcome(env, "users", "resend", "--user-id", "42", "--flow", "reset", "--reason", REASON,
                            "--actor", "alice", "--json")

    assert code == 0, out
    resent = json.loads(out)
    assert resent["flow"] == "reset" and resent["reused"] is False
    code, delivered = cli_outcome(env, "worker", "--once", "--json")
    assert (code, json.loads(delivered)) == (0, {"sent": 1, "skipped": 1})
    [message] = mailbox.Maildir(str(env["AUTHLEDGER_MAILDIR"]), create=False)
    assert message["To"] == ADA
    code, told = cli_outcome(env, "history", "--user-id", "42")
    assert f"Reset request {resent['request_id']} for user 42 was made at" in told
    assert "by cli:alice, valid until" in told
    assert f"Support sent it on the user's behalf because {REASON}." in told


@pytest.mark.parametrize("args, exit_code", [
    (["--user-id", "nobody", "--flow", "reset", "--reason", REASON], 3),
    (["--user-id", "42", "--flow", "sms", "--reason", REASON], 2),
    (["--user-id", "42", "--flow", "reset", "--purpose", "login", "--reason", REASON], 2),
    (["--user-id", "42", "--flow", "otp", "--purpose", "no-such-purpose", "--reason", REASON], 2),
    (["--user-id", "42", "--flow", "reset", "--reason", " "], 2),
])
def test_resend_refuses_bad_input_and_unknown_users_and_writes_nothing(
    ada: None, env: Env, engine: Engine, args: list[str], exit_code: int
) -> None:
    before = log_size(engine)

    code, out = cli_outcome(env, "users", "resend", *args)

    assert code == exit_code, out
    assert "Traceback" not in out
    assert log_size(engine) == before
