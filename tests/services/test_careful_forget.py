"""`privacy forget` is careful: a reason is recorded, a dry run writes nothing, and it is never run by accident.

An erasure cannot be undone, so off a terminal it needs --yes, on a terminal
it asks; --dry-run says what would be destroyed (the data keys, how many
events would read [erased], the links and codes still open) and writes
nothing. Users are scoped per tenant, as everywhere.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import Engine, text

import commands.privacy
from domain.errors import InvalidInput
from domain.otp import RequestOtp
from domain.privacy import SubjectErased, fold_subject, subject_stream
from domain.reset import RequestReset
from infra.clock import ManualClock
from infra.eventlog.codec import default_codec
from infra.eventlog.postgres import PostgresEventStore
from infra.services.otp import request_otp
from infra.services.privacy import forget, preview
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext
from tests.support.cli import Env, run_cli
from tests.support.replay import assert_projections_match_log

ADA = "ada.lovelace@example.test"
REASON = "GDPR request 2024-117"


def forget_args(*more: str) -> list[str]:
    return ["privacy", "forget", "--user-id", "1", *more]


def everything(engine: Engine) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """Every event and every data key, to tell that nothing was written."""
    with engine.connect() as connection:
        events = [tuple(r) for r in connection.execute(text("SELECT global_position, payload FROM events"))]
        keys = [tuple(r) for r in connection.execute(text("SELECT key_id, user_id FROM subject_keys"))]
    return events, keys


def erasures(engine: Engine, user_id: str = "1") -> list[SubjectErased]:
    with engine.connect() as connection:
        return [r.event for r in PostgresEventStore(connection).load(subject_stream(user_id))]


@pytest.fixture
def ada(ctx: ServiceContext, clock: ManualClock) -> None:
    """User 1 holds an open reset link and an open code; an older link was superseded."""
    request_reset(ctx, RequestReset("1", ADA))
    clock.advance(120)
    request_reset(ctx, RequestReset("1", ADA))
    request_otp(ctx, RequestOtp("1", ADA, purpose="login"))


def test_a_dry_run_says_what_would_be_destroyed_and_writes_nothing(
    ada: None, ctx: ServiceContext, engine: Engine, env: Env
) -> None:
    before = everything(engine)

    result = run_cli(env, *forget_args("--reason", REASON, "--dry-run", "--json"))

    assert result.exit_code == 0, result.output
    said = json.loads(result.stdout)
    [key_id] = said["key_ids"]
    assert said == {"user_id": "1", "tenant": "default", "dry_run": True, "key_ids": [key_id],
                    "sealed_events": 6, "open_links": 1, "open_codes": 1, "erased_at": None}, \
        "3 requests and the 3 emails they queued hold an address"
    assert everything(engine) == before
    told = run_cli(env, *forget_args("--reason", REASON, "--dry-run"))
    assert told.exit_code == 0 and told.output.startswith("dry run, nothing changed: erasing user 1 would destroy")
    assert "6 event(s) would read [erased]; 1 reset link(s) and 1 code(s)" in told.output
    assert ADA not in told.output + result.output
    assert everything(engine) == before


def test_off_a_terminal_it_refuses_without_yes_and_writes_nothing(
    ada: None, engine: Engine, env: Env
) -> None:
    before = everything(engine)

    result = run_cli(env, *forget_args("--reason", REASON))

    assert result.exit_code == 2
    assert "cannot be undone" in result.output and "--yes" in result.output and "Traceback" not in result.output
    assert everything(engine) == before


def test_on_a_terminal_it_asks_and_a_no_writes_nothing(
    ada: None, engine: Engine, env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commands.privacy, "on_terminal", lambda: True)
    before = everything(engine)

    declined = run_cli(env, *forget_args("--reason", REASON), input="n\n")

    assert declined.exit_code == 1 and "Erase user 1 for good?" in declined.output
    assert "would destroy data key" in declined.output and "Aborted" in declined.output
    assert everything(engine) == before

    confirmed = run_cli(env, *forget_args("--reason", REASON), input="y\n")
    assert confirmed.exit_code == 0, confirmed.output
    assert "user 1 erased" in confirmed.output
    assert [e.reason for e in erasures(engine)] == [REASON]


def test_the_reason_is_recorded_in_the_erasure_and_told_by_history(
    ada: None, engine: Engine, env: Env
) -> None:
    result = run_cli(env, *forget_args("--reason", f"  {REASON} ", "--yes", "--json"))

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["reason"] == REASON
    [erased] = erasures(engine)
    assert erased.reason == REASON, "trimmed"
    told = run_cli(env, "history", "--user-id", "1")
    assert f"(reason: {REASON})" in told.output and f"personal data erased ({REASON})" in told.output
    assert_projections_match_log(engine)


@pytest.mark.parametrize(("reason", "said"), [
    ("   ", "an erasure needs a reason"),
    (f"asked by {ADA}", "the reason holds an email address"),
    ("line\nbreak", "control characters"),
    ("x" * 501, "keep it to 500"),
])
def test_a_bad_reason_is_refused_before_anything_is_written(
    ada: None, engine: Engine, env: Env, reason: str, said: str
) -> None:
    before = everything(engine)
    for extra in (("--yes",), ("--dry-run",)):
        result = run_cli(env, *forget_args("--reason", reason, *extra))
        assert result.exit_code == 2 and said in result.output, result.output
        assert ADA not in result.output
    missing = run_cli(env, *forget_args("--yes"))
    assert missing.exit_code == 2 and "--reason" in missing.output
    assert everything(engine) == before


def test_the_user_is_looked_for_in_the_tenant_given(ada: None, engine: Engine, env: Env) -> None:
    assert run_cli(env, "tenants", "create", "acme").exit_code == 0  # a tenant that exists, without user 1
    before = everything(engine)

    unknown = run_cli(env, *forget_args("--tenant", "shop", "--reason", REASON, "--yes"))
    assert unknown.exit_code == 2 and "no tenant named 'shop'" in unknown.output
    elsewhere = run_cli(env, *forget_args("--tenant", "acme", "--reason", REASON, "--yes"))
    assert elsewhere.exit_code == 3 and "no user '1' of tenant 'acme'" in elsewhere.output
    dry = run_cli(env, *forget_args("--tenant", "acme", "--reason", REASON, "--dry-run"))
    assert dry.exit_code == 3 and "no user '1' of tenant 'acme'" in dry.output
    bad = run_cli(env, *forget_args("--tenant", "Not A Tenant", "--reason", REASON, "--yes"))
    assert bad.exit_code == 2 and "a tenant name is" in bad.output
    assert everything(engine) == before

    here = run_cli(env, *forget_args("--tenant", "default", "--reason", REASON, "--yes", "--json"))
    assert here.exit_code == 0 and json.loads(here.stdout)["tenant"] == "default"


def test_a_dry_run_after_the_erasure_says_there_is_nothing_left_to_destroy(
    ada: None, ctx: ServiceContext, engine: Engine
) -> None:
    erasure = forget(ctx, "1", reason=REASON)
    found = preview(ctx, "1")
    assert (found.key_ids, found.sealed_events, found.erased_at) == ((), 0, erasure.erased_at)
    again = forget(ctx, "1", reason="another ticket")
    assert not again.recorded and again.reason == REASON, "the earlier erasure's, as nothing changed"
    assert len(erasures(engine)) == 1
    with pytest.raises(InvalidInput):
        forget(ctx, "1", reason="")


def test_an_erasure_recorded_before_reasons_were_asked_reads_with_no_reason() -> None:
    version_1 = {"user_id": "42", "erased_at": "2026-01-01T00:00:00+00:00", "key_ids": ["3f9c0a"]}

    event = default_codec().decode("SubjectErased", 1, version_1)

    assert event.reason is None and event.key_ids == ("3f9c0a",)
    assert fold_subject([event]).erasures == 1
    assert default_codec().encode(SubjectErased("42", event.erased_at, (), "ticket 1"))[1:] == (
        2, {"user_id": "42", "erased_at": "2026-01-01T00:00:00+00:00", "key_ids": [], "reason": "ticket 1"})
