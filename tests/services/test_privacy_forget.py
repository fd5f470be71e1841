"""`authledger privacy forget` on real PostgreSQL: the address is gone, the log and its seals are not.

Two users go through a whole reset and a whole OTP flow; then one of them
is forgotten. A dump never shows an address in clear, before or after; the
forgotten user's addresses decode as [erased] wherever they are opened
(services, workers) while the other user's still decode; the hash chain, sealed before and after, verifies; the
projections still equal a replay of the log; and an email still queued for
the forgotten user is skipped with reason "erased".
"""

from __future__ import annotations

import json
import os
import pwd
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlalchemy import Engine, text

from domain.email import EmailQueued
from domain.errors import IdempotencyMismatch
from domain.log import Checkpoint
from domain.otp import RequestOtp
from domain.privacy import SubjectErased, subject_stream
from domain.reset import RequestReset
from infra.clock import ManualClock
from infra.review.history import history
from infra.services.otp import request_otp, verify_code
from infra.eventlog.personal_data import ERASED
from infra.eventlog.postgres import PostgresEventStore
from infra.eventlog.reader import HORIZON, Reading, read_page
from infra.services.reset import consume_token, request_reset
from infra.services.unit_of_work import ServiceContext
from infra.delivery.worker import Worker
from projections.timeline import format_time
from tests.support.cli import Env, run_cli
from tests.support.dumps import dump
from tests.support.mailers import RecordingMailer
from tests.support.replay import assert_projections_match_log

SENDER = "authledger <no-reply@app.test>"
ADA, BOB = "ada.lovelace@example.test", "bob.babbage@example.test"
ADDRESSES = {"1": ADA, "2": BOB}


def whole_flows(ctx: ServiceContext, clock: ManualClock, mailer: RecordingMailer) -> None:
    """Each user: a reset link used, a code verified, every email (and notice) delivered."""
    for user_id, address in ADDRESSES.items():
        request_reset(ctx, RequestReset(user_id, address))
        challenge = request_otp(ctx, RequestOtp(user_id, address, purpose="login"))
        assert Worker(ctx, mailer, sender=SENDER).drain() == {"sent": 2}
        link = next(line for e in mailer.sent_to(address) for line in e.text_body.splitlines()
                    if line.startswith("https://app.test/"))
        consume_token(ctx, parse_qs(urlsplit(link).query)["token"][0])
        code = next(line.strip() for e in mailer.sent_to(address) for line in e.text_body.splitlines()
                    if line.strip().isdigit())
        assert verify_code(ctx, challenge.request_id, code, user_id=user_id).verified
        assert Worker(ctx, mailer, sender=SENDER).drain() == {"sent": 1}, "the password-changed notice"
    clock.advance(120)  # past the cooldown, so that a new request queues a new email


def recipients_of(engine: Engine, user_id: str) -> set[str]:
    """Every recipient of the user's events, decoded as services and workers decode them."""
    with engine.connect() as connection:
        events = read_page(connection, Checkpoint(), HORIZON, 100_000, reading=Reading(personal_data=True))
    return {r.event.recipient for r in events if getattr(r.event, "user_id", None) == user_id
            and hasattr(r.event, "recipient")}


def stored_payloads(engine: Engine) -> list[str]:
    with engine.connect() as connection:
        return list(connection.execute(text("SELECT payload::text FROM events ORDER BY global_position")).scalars())


def key_rows(engine: Engine) -> list[tuple[object, ...]]:
    with engine.connect() as connection:
        return [tuple(row) for row in connection.execute(text("SELECT * FROM subject_keys ORDER BY user_id"))]


def test_forgetting_a_user_erases_their_addresses_and_leaves_the_log_sealed_and_the_other_user_readable(
    ctx: ServiceContext, clock: ManualClock, engine: Engine, database_url: str, env: Env
) -> None:
    mailer = RecordingMailer()
    whole_flows(ctx, clock, mailer)
    pending = request_otp(ctx, RequestOtp("1", ADA, purpose="login"))  # queued, not yet sent

    before = dump(database_url)
    assert "enc:v1:" in dump(database_url, table="events"), "the events hold ciphertext"
    assert ADA not in before and BOB not in before, "no address in clear anywhere, even before the erasure"
    assert recipients_of(engine, "1") == {ADA} and recipients_of(engine, "2") == {BOB}
    assert run_cli(env, "audit", "seal").exit_code == 0
    log_before = stored_payloads(engine)

    forgotten = run_cli(env, "privacy", "forget", "--user-id", "1", "--yes", "--reason", "ticket 7", "--json")
    assert forgotten.exit_code == 0, forgotten.output
    assert json.loads(forgotten.stdout)["recorded"] is True and len(json.loads(forgotten.stdout)["key_ids"]) == 1

    after = dump(database_url)
    assert ADA not in after and BOB not in after
    assert stored_payloads(engine)[: len(log_before)] == log_before, "not one stored byte of the log changed"
    assert recipients_of(engine, "1") == {ERASED}
    assert recipients_of(engine, "2") == {BOB}, "the other user is untouched"

    assert Worker(ctx, mailer, sender=SENDER).drain() == {"skipped": 1}
    assert not [e for e in mailer.emails if e.message_id == pending.message_id], "nothing sent to the erased user"
    with engine.connect() as connection:
        state, reason = connection.execute(text("SELECT state, skip_reason FROM email_outbox WHERE message_id = :m"),
                                           {"m": pending.message_id}).one()
    assert (state, reason) == ("skipped", "erased")

    told = history(engine, "1", now=clock.now()).render()
    assert "skipped (erased)" in told and ADA not in told
    assert_projections_match_log(engine)
    sealed = run_cli(env, "audit", "seal")
    assert sealed.exit_code == 0, sealed.output
    verified = run_cli(env, "audit", "verify")
    assert verified.exit_code == 0 and "ok:" in verified.output, verified.output


def test_forget_records_the_erasure_once_and_a_repeat_changes_nothing(
    ctx: ServiceContext, engine: Engine, env: Env
) -> None:
    request_reset(ctx, RequestReset("1", ADA))
    first = run_cli(env, "privacy", "forget", "--user-id", "1", "--yes", "--reason", "ticket 7")
    assert first.exit_code == 0 and "data key" in first.output and "destroyed" in first.output
    again = run_cli(env, "privacy", "forget", "--user-id", "1", "--yes", "--reason", "ticket 7", "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["recorded"] is False
    with engine.connect() as connection:
        erased = PostgresEventStore(connection).load(subject_stream("1"))
        keys = connection.execute(text("SELECT count(*) FROM subject_keys")).scalar_one()
    assert [type(r.event) for r in erased] == [SubjectErased] and len(erased[0].event.key_ids) == 1
    assert erased[0].metadata["command"] == "privacy forget"
    assert keys == 0


def test_a_user_who_comes_back_after_being_forgotten_gets_a_new_key_and_the_old_data_stays_erased(
    ctx: ServiceContext, clock: ManualClock, engine: Engine, env: Env
) -> None:
    request_reset(ctx, RequestReset("1", ADA))
    assert run_cli(env, "privacy", "forget", "--user-id", "1", "--yes", "--reason", "ticket 7").exit_code == 0
    clock.advance(120)
    request_reset(ctx, RequestReset("1", "ada.new@example.test"))
    assert recipients_of(engine, "1") == {ERASED, "ada.new@example.test"}


def test_forgetting_an_unknown_user_is_a_clear_error_and_changes_nothing(
    ctx: ServiceContext, engine: Engine, env: Env
) -> None:
    request_reset(ctx, RequestReset("1", ADA))
    log_before, keys_before = stored_payloads(engine), key_rows(engine)
    result = run_cli(env, "privacy", "forget", "--user-id", "nobody", "--yes", "--reason", "ticket 7")
    assert result.exit_code == 3
    assert "no user 'nobody'" in result.output and "nothing was changed" in result.output
    assert "Traceback" not in result.output
    assert stored_payloads(engine) == log_before and key_rows(engine) == keys_before
    bad = run_cli(env, "privacy", "forget", "--user-id", "a b", "--yes", "--reason", "ticket 7")
    assert bad.exit_code == 2 and "user_id must not contain whitespace" in bad.output


def test_a_ciphertext_copied_into_another_users_event_fails_to_decrypt_clearly(
    ctx: ServiceContext, engine: Engine, admin_engine: Engine, env: Env
) -> None:
    from tests.support.audit_log import tampering

    request_reset(ctx, RequestReset("1", ADA))
    request_reset(ctx, RequestReset("2", BOB))
    with tampering(admin_engine) as connection:
        connection.execute(text("""
            UPDATE events SET payload = jsonb_set(payload, '{recipient}',
                   (SELECT payload->'recipient' FROM events WHERE stream_id = 'reset-user:1'))
             WHERE stream_id = 'reset-user:2'
        """))
    result = run_cli({**env, "AUTHLEDGER_TOKEN_KEYS": "k1:" + "a" * 43}, "reset", "request", "--user-id", "2",
                     "--email", BOB)
    assert result.exit_code == 65, result.output
    assert "ResetRequested.recipient of user '2' does not decrypt" in result.output
    assert "copied from another event, field or user" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("flow", ["reset", "otp"])
def test_an_email_queued_before_the_erasure_is_skipped_not_sent(
    ctx: ServiceContext, engine: Engine, env: Env, flow: str
) -> None:
    if flow == "reset":
        outcome = request_reset(ctx, RequestReset("1", ADA))
    else:
        outcome = request_otp(ctx, RequestOtp("1", ADA, purpose="login"))
    assert run_cli(env, "privacy", "forget", "--user-id", "1", "--yes", "--reason", "ticket 7").exit_code == 0
    mailer = RecordingMailer()
    assert Worker(ctx, mailer, sender=SENDER).drain() == {"skipped": 1}
    assert mailer.emails == []
    with engine.connect() as connection:
        queued = [r.event for r in PostgresEventStore(connection).load(f"email:{outcome.message_id}")]
    assert isinstance(queued[0], EmailQueued) and queued[0].recipient == ERASED
    assert queued[-1].reason == "erased"
    assert_projections_match_log(engine)


def test_replaying_an_idempotency_key_of_an_erased_user_is_refused_as_different_parameters(
    ctx: ServiceContext, env: Env
) -> None:
    request_reset(ctx, RequestReset("1", ADA, idempotency_key="r-1", client="app"))
    assert run_cli(env, "privacy", "forget", "--user-id", "1", "--yes", "--reason", "ticket 7").exit_code == 0
    with pytest.raises(IdempotencyMismatch):
        request_reset(ctx, RequestReset("1", ADA, idempotency_key="r-1", client="app"))


def test_history_tells_who_erased_the_user_and_when_without_their_address(
    ctx: ServiceContext, engine: Engine, env: Env
) -> None:
    request_reset(ctx, RequestReset("1", ADA))
    assert run_cli(env, "privacy", "forget", "--user-id", "1", "--yes", "--reason", "ticket 7", "--actor",
                   "dana").exit_code == 0
    with engine.connect() as connection:
        erased = PostgresEventStore(connection).load(subject_stream("1"))[0]
    key_id, = erased.event.key_ids
    said = (f"User 1's personal data was erased at {format_time(erased.event.erased_at)} by cli:dana "
            "(reason: ticket 7): data key "
            f"{key_id} destroyed. From then on their email addresses in the log read [erased]")

    told = run_cli(env, "history", "--user-id", "1")
    assert told.exit_code == 0, told.output
    assert said in told.output
    erasure_line = next(line for line in told.output.splitlines() if "SubjectErased" in line)
    assert "subject:1" in erasure_line and "cli:dana" in erasure_line
    assert erasure_line.endswith(f"personal data erased (ticket 7): data key {key_id} destroyed")
    as_json = run_cli(env, "history", "--user-id", "1", "--flow", "reset", "--json")
    assert as_json.exit_code == 0, as_json.output
    assert any(f["sentence"].startswith(said) and f["kind"] == "SubjectErased" and f["user_id"] == "1"
               for f in json.loads(as_json.stdout)["findings"]), "kept in the user's flow"
    assert ADA not in told.output + as_json.output
    other_flow = run_cli(env, "history", "--user-id", "1", "--flow", "otp")
    assert other_flow.exit_code == 3, "an erasure alone is not a flow's history"


def test_without_actor_the_erasure_names_the_os_account_even_when_user_is_unset(
    ctx: ServiceContext, engine: Engine, env: Env
) -> None:
    request_reset(ctx, RequestReset("1", ADA))
    assert run_cli({**env, "USER": None}, "privacy", "forget", "--user-id", "1", "--yes", "--reason",
                   "ticket 7").exit_code == 0
    with engine.connect() as connection:
        erased = PostgresEventStore(connection).load(subject_stream("1"))[0]
    assert erased.metadata["actor"] == f"cli:{pwd.getpwuid(os.getuid()).pw_name}" != "cli:unknown"
