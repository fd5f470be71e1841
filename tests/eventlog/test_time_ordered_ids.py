"""What is appended to the log carries time-ordered ids (UUIDv7), so appends fill the right edge of its indexes."""

from __future__ import annotations

import time
from uuid import UUID

from sqlalchemy import Engine, text

from domain.reset import RequestReset
from infra.clock import ManualClock
from infra.delivery.leases import claim_due
from infra.eventlog.ids import time_ordered_id
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext


def test_ids_made_a_millisecond_apart_sort_in_the_order_they_were_made() -> None:
    made = []
    for _ in range(5):
        made.append(time_ordered_id())
        time.sleep(0.002)
    assert made == sorted(made)


def test_ten_thousand_ids_made_at_once_are_all_different_version_7_rfc_uuids() -> None:
    made = [time_ordered_id() for _ in range(10_000)]
    assert len(set(made)) == len(made)
    assert {(made_id.version, made_id.variant) for made_id in made} == {(7, "specified in RFC 4122")}
    assert len({made_id.hex[13:16] for made_id in made}) > 1000, "the 12 bits after the version are random too"


def test_every_event_a_request_and_a_claim_append_and_every_new_id_is_time_ordered(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    outcome = request_reset(ctx, RequestReset("42", "ada@example.test"))
    with engine.begin() as connection:
        claim_due(connection, owner="w1", limit=10, now=clock.now(), policy=ctx.delivery_policy)
    with engine.connect() as connection:
        appended = connection.execute(text("SELECT event_type, event_id FROM events ORDER BY global_position")).all()

    assert [event_type for event_type, _ in appended] == ["ResetRequested", "EmailQueued", "LeaseClaimed"]
    assert {event_id.version for _, event_id in appended} == {7}
    assert outcome.request_id.version == outcome.message_id.version == 7


def test_new_users_data_keys_get_time_ordered_ids_in_the_order_they_were_made(
    ctx: ServiceContext, engine: Engine
) -> None:
    for user in ("zoe", "adam", "mia"):  # user ids out of order: the key ids still follow creation
        request_reset(ctx, RequestReset(user, f"{user}@example.test"))
        time.sleep(0.002)
    with engine.connect() as connection:
        keys = connection.execute(text("SELECT user_id, key_id FROM subject_keys ORDER BY created_at")).all()
    assert [user for user, _ in keys] == ["zoe", "adam", "mia"]
    assert [key_id for _, key_id in keys] == sorted(key_id for _, key_id in keys)
    assert {UUID(key_id).version for _, key_id in keys} == {7}
