"""`authledger webhooks`: the secret printed once, bad input refused before anything is written."""

from __future__ import annotations

import json

from sqlalchemy import Engine, text

from tests.support.cli import cli_outcome, run_cli

Env = dict[str, str | None]


def events(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(text("SELECT count(*) FROM events")).scalar_one())


def test_add_prints_the_secret_once_list_never_and_rotate_and_remove_are_recorded(env: Env, engine: Engine) -> None:
    code, out = cli_outcome(env, "webhooks", "add", "--url", "https://hooks.app.test/a", "--event", "otp.verified",
                            "--json")
    assert code == 0, out
    added = json.loads(out)
    assert added["secret"].startswith("whsec_") and added["event_types"] == ["otp.verified"]
    code, listed = cli_outcome(env, "webhooks", "list", "--json")
    assert code == 0 and added["secret"] not in listed
    [endpoint] = json.loads(listed)
    assert endpoint["endpoint_id"] == added["endpoint_id"] and endpoint["status"] == "active"

    code, out = cli_outcome(env, "webhooks", "rotate", added["endpoint_id"], "--json")
    assert code == 0 and json.loads(out)["secret"] not in (added["secret"], "")
    code, out = cli_outcome(env, "webhooks", "remove", added["endpoint_id"])
    assert code == 0, out
    code, listed = cli_outcome(env, "webhooks", "list", "--json")
    assert [e["status"] for e in json.loads(listed)] == ["removed"]
    assert json.loads(listed)[0]["previous_secret_until"] is not None


def test_bad_input_exits_2_with_a_reason_and_writes_nothing(env: Env, engine: Engine) -> None:
    before = events(engine)
    for args, said in [
        (["--url", "http://hooks.app.test/a"], "https://"),
        (["--url", "ftp://hooks.app.test/a"], "URL"),
        (["--url", "https://hooks.app.test/a", "--event", "email.opened"], "email.opened"),
        (["--url", "https://" + "a" * 2100 + ".test"], "characters"),
        (["--url", "https://app:s3cret@hooks.app.test/a"], "no user name or password"),
        (["--url", "https://hooks.app.test/a", "--tenant", "nobody"], "nobody"),
    ]:
        result = run_cli(env, "webhooks", "add", *args)
        assert result.exit_code == 2, (args, result.output)
        assert said in result.output and "Traceback" not in result.output
    result = run_cli(env, "webhooks", "rotate", "ep_nope")
    assert result.exit_code == 2 and "Traceback" not in result.output
    result = run_cli(env, "webhooks", "remove", "ep_" + "0" * 32)
    assert result.exit_code != 0 and "no webhook endpoint" in result.output
    assert events(engine) == before
