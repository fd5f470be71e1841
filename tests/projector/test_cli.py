"""The `projections`, `history` and `explain` commands, as an operator runs them."""

from __future__ import annotations

import json

from sqlalchemy import Engine, text

from infra.clock import ManualClock
from infra.errors import ReplayTargetExists
from infra.projector.registry import all_projections
from infra.projector.status import row_count
from infra.services.unit_of_work import ServiceContext
from tests.support.cli import Env, cli_streams
from tests.support.incidents import stale_link
from tests.support.traffic import some_traffic


def test_list_names_every_projection_with_its_kind(env: Env) -> None:
    code, out, _ = cli_streams(env, "projections", "list", "--json")
    assert code == 0
    listed = {p["name"]: p["kind"] for p in json.loads(out)}
    assert listed == {p.name: p.kind for p in all_projections()}
    assert listed["email_outbox"] == "inline" and listed["delivery_stats"] == "catch-up"


def test_status_shows_the_lag_and_after_run_once_none(
    env: Env, ctx: ServiceContext, clock: ManualClock
) -> None:
    some_traffic(ctx, clock)
    code, out, _ = cli_streams(env, "projections", "status", "--json")
    before = {p["name"]: p for p in json.loads(out)["projections"]}
    assert code == 0 and before["audit_index"]["lag_events"] > 0 and before["audit_index"]["lag_seconds"] >= 0

    code, out, _ = cli_streams(env, "projections", "run", "--once", "--json")
    assert code == 0 and json.loads(out)["audit_index"] == before["audit_index"]["lag_events"]

    code, out, _ = cli_streams(env, "projections", "status")
    assert code == 0
    assert "audit_index" in out and "oldest open transaction: none holds the horizon back" in out
    code, out, _ = cli_streams(env, "projections", "status", "--json")
    assert all(p["lag_events"] == 0 for p in json.loads(out)["projections"])


def test_status_warns_about_a_transaction_holding_the_horizon_back(
    env: Env, ctx: ServiceContext, clock: ManualClock, engine: Engine
) -> None:
    some_traffic(ctx, clock, users=2)
    with engine.connect() as holder:
        holder.execute(text("SELECT pg_current_xact_id()"))  # an open transaction with an id
        some_traffic(ctx, clock, users=2)
        code, out, _ = cli_streams(env, "projections", "status", "--warn-after", "0", "--json")
    status = json.loads(out)
    assert code == 0 and status["events_held_back"] > 0
    assert status["oldest_open_transaction"]["state"] == "idle in transaction"
    assert "catch-up projections and the sealer cannot read past it" in status["warnings"][0]


def test_rebuild_verify_and_a_second_rebuild_refused(
    env: Env, ctx: ServiceContext, clock: ManualClock, admin_engine: Engine
) -> None:
    some_traffic(ctx, clock)
    code, out, err = cli_streams(env, "projections", "rebuild", "email_outbox")
    assert code == 0, err
    assert "email_outbox: rebuilt from" in out and "events/s" in out and "rebuilding email_outbox" in err

    with admin_engine.connect() as holder:  # a rebuild in progress elsewhere holds this lock
        holder.execute(text("SELECT pg_advisory_lock(x'61757468'::int, hashtext('reset_tokens'))"))
        holder.execute(text("SELECT set_config('application_name', 'authledger rebuild reset_tokens', false)"))
        holder.commit()
        code, _, err = cli_streams(env, "projections", "rebuild", "reset_tokens")
        holder.execute(text("SELECT pg_advisory_unlock_all()"))
        holder.commit()
    assert code == 75
    assert "cannot rebuild reset_tokens: authledger rebuild reset_tokens (pid" in err

    with admin_engine.begin() as connection:
        connection.execute(text("UPDATE reset_tokens SET status = 'open' WHERE status = 'superseded'"))
    code, out, err = cli_streams(env, "projections", "verify")
    assert code == 9
    assert "reset_tokens: DIFFERS" in out and "status: live open != replay superseded" in out
    assert "email_outbox: ok" in out
    assert "reset_tokens differ from a replay of the log" in err


def test_replay_into_a_schema_and_drop_it(env: Env, ctx: ServiceContext, clock: ManualClock) -> None:
    some_traffic(ctx, clock)
    code, out, err = cli_streams(env, "projections", "replay", "email_outbox", "--to-position", "5", "--into",
                                 "review_1", "--json")
    assert code == 0, err
    assert json.loads(out)["tables"] == ["review_1.email_outbox"]
    code, _, err = cli_streams(env, "projections", "replay", "email_outbox", "--to-position", "5", "--into", "review_1")
    assert code == ReplayTargetExists.exit_code == 10
    assert "review_1.email_outbox already exists; drop the schema first" in err
    for bad in ["public", "Review", "x; DROP TABLE events", "pg_catalog", "1abc"]:
        code, _, err = cli_streams(env, "projections", "replay", "email_outbox", "--to-position", "5", "--into", bad)
        assert code == 2 and "is not a usable replay schema name" in err
    code, _, err = cli_streams(env, "projections", "replay", "--drop", "public")
    assert code == 2
    code, out, _ = cli_streams(env, "projections", "replay", "--drop", "review_1")
    assert code == 0 and "dropped schema review_1" in out


def test_explain_prints_sentences_then_a_timeline_and_json(env: Env, ctx: ServiceContext,
                                                           engine: Engine) -> None:
    ids = stale_link(ctx, engine)
    code, out, _ = cli_streams(env, "explain", "--request-id", str(ids["old_request"]))
    assert code == 0
    assert f"was superseded by {ids['new_request']} at 2024-05-01 10:05:00.000+00:00" in out
    assert "time (UTC)" in out and "ResetSuperseded" in out
    code, out, _ = cli_streams(env, "explain", "--message-id", str(ids["old_message"]), "--json")
    review = json.loads(out)
    assert review["subject"] == f"message {ids['old_message']}"
    assert review["timeline"][0]["at"] == "2024-05-01T10:00:00+00:00"
    code, out, err = cli_streams(env, "history", "--user-id", "nobody")
    assert code == 3 and "no events about user 'nobody'" in err


def test_outbox_stats_reports_per_day_flow_and_outcome(env: Env, ctx: ServiceContext, engine: Engine) -> None:
    stale_link(ctx, engine)  # on 2024-05-01: outside the last 7 days, inside the last 10,000
    cli_streams(env, "projections", "run", "--once")
    code, out, _ = cli_streams(env, "outbox", "stats", "--days", "3660", "--json")
    assert code == 0
    days = json.loads(out)["days"]
    assert days == [{"day": "2024-05-01", "flow": "reset", "outcome": "sent", "messages": 3, "attempts": 3,
                     "p50_seconds": 1.0, "p95_seconds": 2.0, "max_seconds": 2.0}]
    code, out, _ = cli_streams(env, "outbox", "stats")
    assert code == 0 and "no messages in that period" in out


def test_status_counts_rows_exactly_and_verify_counts_each_row_once(
    env: Env, ctx: ServiceContext, clock: ManualClock, admin_engine: Engine
) -> None:
    some_traffic(ctx, clock)
    with admin_engine.connect() as connection:
        outbox_rows = connection.execute(text("SELECT count(*) FROM email_outbox")).scalar_one()
    assert outbox_rows > 0

    code, out, _ = cli_streams(env, "projections", "status", "--json")
    states = {p["name"]: p for p in json.loads(out)["projections"]}
    assert code == 0 and states["email_outbox"]["rows"] == outbox_rows and states["email_outbox"]["rows_exact"]
    code, out, _ = cli_streams(env, "projections", "status")
    [outbox_line] = [line for line in out.splitlines() if line.startswith("email_outbox ")]
    assert code == 0 and outbox_line.endswith(f" {outbox_rows}") and "~" not in out

    code, out, _ = cli_streams(env, "projections", "verify", "email_outbox")
    assert code == 0 and f"({outbox_rows} rows compared)" in out


def test_past_the_exact_count_limit_rows_are_a_labelled_estimate_never_zero(
    ctx: ServiceContext, clock: ManualClock, admin_engine: Engine
) -> None:
    some_traffic(ctx, clock)
    [outbox] = [p for p in all_projections() if p.name == "email_outbox"]
    with admin_engine.connect() as connection:
        held = connection.execute(text("SELECT count(*) FROM email_outbox")).scalar_one()
        assert held > 2
        assert row_count(connection, outbox.tables[0]) == (held, True)
        estimate, exact = row_count(connection, outbox.tables[0], limit=2)  # never analysed: the planner says 0
    assert not exact and estimate >= 3
