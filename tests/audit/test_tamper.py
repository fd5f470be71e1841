"""A superuser rewrites history behind the append-only guards; `audit verify` names the first bad event."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import Engine, text

from infra.audit import seal as sealer
from tests.support.audit_log import position_of, seed, tampering
from tests.support.cli import Env, run_cli


def sealed_log(engine: Engine, messages: int = 4) -> list[str]:
    streams = seed(engine, messages)
    sealer.seal(engine)
    return streams


def verify(env: Env, *args: str) -> tuple[int, str]:
    outcome = run_cli(env, "audit", "verify", *args)
    return outcome.exit_code, outcome.stdout if "--json" in args else outcome.output


def test_changing_one_byte_of_a_payload_is_named(engine: Engine, admin_engine: Engine, env: Env) -> None:
    streams = sealed_log(engine)
    position = position_of(engine, streams[2], 1)
    with tampering(admin_engine) as connection:
        connection.execute(text("""
            UPDATE events SET payload = CAST(replace(payload::text, '"user-2"', '"user-7"') AS jsonb)
             WHERE global_position = :position
        """), {"position": position})
    code, output = verify(env)
    assert code == 8, output
    assert f"changed: event {streams[2]} v1 at position {position}" in output
    assert "no longer matches its seal" in output


def test_a_deleted_event_is_named(engine: Engine, admin_engine: Engine, env: Env) -> None:
    streams = sealed_log(engine)
    position = position_of(engine, streams[1], 2)
    with tampering(admin_engine) as connection:
        connection.execute(text("DELETE FROM events WHERE global_position = :p"), {"p": position})
    code, output = verify(env)
    assert code == 8
    assert f"deleted: event {streams[1]} v2 at position {position}" in output


def test_swapping_two_payloads_names_the_first_of_them(engine: Engine, admin_engine: Engine, env: Env) -> None:
    streams = sealed_log(engine)
    first, second = position_of(engine, streams[1], 2), position_of(engine, streams[3], 2)
    with tampering(admin_engine) as connection:
        connection.execute(text("""
            UPDATE events e SET payload = o.payload
              FROM events o
             WHERE (e.global_position, o.global_position) IN ((:a, :b), (:b, :a))
        """), {"a": first, "b": second})
    code, output = verify(env)
    assert code == 8
    assert f"changed: event {streams[1]} v2 at position {first}" in output


def test_an_event_moved_to_another_place_in_the_order_is_named(
    engine: Engine, admin_engine: Engine, env: Env
) -> None:
    streams = sealed_log(engine)
    position = position_of(engine, streams[0], 1)
    with tampering(admin_engine) as connection:
        connection.execute(text("""
            UPDATE events SET transaction_id = (SELECT max(transaction_id) FROM events)
             WHERE global_position = :p
        """), {"p": position})
    code, output = verify(env)
    assert code == 8
    assert f"moved: event {streams[0]} v1 at position {position}" in output


def test_a_forged_event_inside_the_sealed_log_is_named(engine: Engine, admin_engine: Engine, env: Env) -> None:
    streams = sealed_log(engine)
    with tampering(admin_engine) as connection:
        forged = connection.execute(text("""
            INSERT INTO events (stream_id, stream_version, event_id, event_type, schema_version, payload,
                                transaction_id)
            SELECT stream_id, 4, gen_random_uuid(), 'LeaseExpired', 1, payload, transaction_id
              FROM events WHERE global_position = :p
            RETURNING global_position
        """), {"p": position_of(engine, streams[1], 2)}).scalar_one()
    code, output = verify(env)
    assert code == 8
    assert f"inserted: event {streams[1]} v4 at position {forged}" in output


def test_a_range_check_names_the_bad_event_inside_it_and_passes_outside(
    engine: Engine, admin_engine: Engine, env: Env
) -> None:
    streams = sealed_log(engine)
    position = position_of(engine, streams[3], 1)
    with tampering(admin_engine) as connection:
        connection.execute(text("""
            UPDATE events SET metadata = jsonb_set(metadata, '{actor}', '"someone else"') WHERE global_position = :p
        """), {"p": position})
    code, output = verify(env, "--from", "1", "--to", str(position - 1))
    assert code == 0, output
    code, output = verify(env, "--from", str(position), "--to", str(position + 1), "--json")
    assert code == 8
    problem = json.loads(output)["problem"]
    assert (problem["kind"], problem["stream_id"], problem["global_position"]) == ("changed", streams[3], position)


def test_a_rewritten_chain_passes_alone_but_not_against_a_saved_digest(
    engine: Engine, admin_engine: Engine, tmp_path: Path, env: Env
) -> None:
    """The seals are only as good as the digest kept elsewhere: a superuser can rewrite both tables."""
    streams = sealed_log(engine)
    digest = tmp_path / "digest.json"
    assert run_cli(env, "audit", "digest", "--out", str(digest)).exit_code == 0
    sealer.seal(engine)
    with tampering(admin_engine) as connection:
        connection.execute(text("""
            UPDATE events SET payload = jsonb_set(payload, '{recipient}', '"attacker@example.com"')
             WHERE stream_id = :s AND stream_version = 1
        """), {"s": streams[0]})
    with tampering(admin_engine, "seals") as connection:
        connection.execute(text("DELETE FROM seals"))
    sealer.seal(engine)  # the attacker recomputes every link over the forged log

    code, output = verify(env)
    assert code == 0, "alone, a fully recomputed chain is consistent"
    code, output = verify(env, "--digest", str(digest))
    assert code == 8
    assert "digest-mismatch" in output and "does not reach the signed link" in output


def test_removing_the_newest_events_and_their_seals_is_caught_by_the_digest(
    engine: Engine, admin_engine: Engine, tmp_path: Path, env: Env
) -> None:
    sealed_log(engine)
    digest = tmp_path / "digest.json"
    assert run_cli(env, "audit", "digest", "--out", str(digest)).exit_code == 0
    with tampering(admin_engine) as connection:
        connection.execute(text(
            "DELETE FROM events WHERE global_position > (SELECT max(global_position) - 3 FROM events)"))
    with tampering(admin_engine, "seals") as connection:
        connection.execute(text("DELETE FROM seals WHERE chain_index > 8"))
    assert verify(env)[0] == 0
    code, output = verify(env, "--digest", str(digest))
    assert code == 8 and "the digest covers chain index 11 but the chain ends at chain index 8" in output


def test_a_digest_of_the_untouched_log_verifies(engine: Engine, tmp_path: Path, env: Env) -> None:
    sealed_log(engine)
    digest = tmp_path / "digest.json"
    outcome = run_cli(env, "audit", "digest", "--out", str(digest))
    assert outcome.exit_code == 0, outcome.output
    seed(engine, 1)
    sealer.seal(engine)
    code, output = verify(env, "--digest", str(digest))
    assert code == 0, output
    assert "the log extends the digest of chain index 11, signed by the trusted key ed25519:" in output
