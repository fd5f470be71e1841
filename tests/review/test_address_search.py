"""Reviewers find users by email address through a keyed hash; never a plaintext index, never an erased user."""

from __future__ import annotations

from uuid import uuid4

import pytest
from sqlalchemy import Engine, text

from domain.errors import InvalidInput
from domain.otp import RequestOtp
from domain.reset import RequestReset
from domain.reset_events import ResetRequested, reset_stream
from domain.tokens import TokenKeys
from infra.projector.registry import projection_named
from infra.projector.verify import verify
from infra.services.address_index import address_hmac, candidate_hmacs, users_by_address
from infra.services.otp import request_otp
from infra.services.privacy import forget
from infra.services.reset import request_reset
from infra.services.unit_of_work import ServiceContext, append_and_fold
from tests.support.replay import assert_projections_match_log

ADA = "ada@example.test"


def dump(engine: Engine) -> str:
    with engine.connect() as connection:
        events = connection.execute(text("SELECT string_agg(payload::text, ' ') FROM events")).scalar() or ""
        index = connection.execute(text("SELECT string_agg(hashes, ' ') FROM address_index")).scalar() or ""
    return events + index


def test_a_reset_or_code_request_makes_its_user_findable_by_address_in_any_case(ctx: ServiceContext) -> None:
    request_reset(ctx, RequestReset("u1", ADA))
    request_otp(ctx, RequestOtp("u2", ADA, purpose="login"))
    request_reset(ctx, RequestReset("u3", "bob@example.test"))
    assert users_by_address(ctx, "default", ADA) == ["u1", "u2"]
    assert users_by_address(ctx, "default", "  Ada@EXAMPLE.test ") == ["u1", "u2"]
    assert users_by_address(ctx, "default", "nobody@example.test") == []
    assert_projections_match_log(ctx.engine)


def test_neither_the_events_nor_the_index_hold_the_address_or_its_unkeyed_hash(ctx: ServiceContext) -> None:
    import hashlib

    request_reset(ctx, RequestReset("u1", ADA))
    stored = dump(ctx.engine)
    assert ADA not in stored
    assert hashlib.sha256(ADA.encode()).hexdigest() not in stored
    hmac_value = address_hmac(ctx.keys, ADA)
    assert hmac_value in stored, "the index holds the keyed hash"
    assert stored.count(hmac_value) == 1, "in the event the hash is sealed under the user's data key"


def test_another_tenants_users_are_not_found(ctx: ServiceContext) -> None:
    request_reset(ctx, RequestReset("u1", ADA))
    event = ResetRequested(
        request_id=uuid4(), user_id="acme u9", recipient=ADA, key_id="k2", token_hash="0" * 64,
        requested_at=ctx.clock.now(), expires_at=ctx.clock.now(), message_id=uuid4(), idempotency_key=None,
        client=None, address_hmac=address_hmac(ctx.keys, ADA),
    )
    with ctx.engine.begin() as connection:
        append_and_fold(connection, [(reset_stream("acme u9"), 0, [event])])
    assert users_by_address(ctx, "default", ADA) == ["u1"]
    assert users_by_address(ctx, "acme", ADA) == ["u9"], "tenant-local ids, like every edge"
    assert users_by_address(ctx, "shop", ADA) == []


def test_an_erased_user_is_not_findable_and_a_replay_agrees(ctx: ServiceContext, admin_engine: Engine) -> None:
    request_reset(ctx, RequestReset("u1", ADA))
    request_reset(ctx, RequestReset("u2", ADA))
    forget(ctx, "u1", reason="the user asked to be forgotten")
    assert users_by_address(ctx, "default", ADA) == ["u2"]
    assert_projections_match_log(ctx.engine)
    assert verify(admin_engine, projection_named("address_index")).ok


def test_a_rebuild_of_the_index_opens_the_hashes_and_leaves_the_erased_user_out(
    ctx: ServiceContext, admin_engine: Engine
) -> None:
    from infra.projector.rebuild import rebuild

    request_reset(ctx, RequestReset("u1", ADA))
    request_otp(ctx, RequestOtp("u2", ADA))
    forget(ctx, "u1", reason="the user asked to be forgotten")
    rebuild(admin_engine, projection_named("address_index"), batch_size=2)
    assert users_by_address(ctx, "default", ADA) == ["u2"]
    with ctx.engine.connect() as connection:
        rows = connection.execute(text("SELECT user_id, hashes FROM address_index ORDER BY user_id")).all()
    assert [(r.user_id, bool(r.hashes)) for r in rows] == [("u1", False), ("u2", True)]
    assert_projections_match_log(ctx.engine)


def test_a_request_after_erasure_is_found_again(ctx: ServiceContext) -> None:
    request_reset(ctx, RequestReset("u1", ADA))
    forget(ctx, "u1", reason="the user asked to be forgotten")
    ctx.clock.advance(3600)
    request_reset(ctx, RequestReset("u1", "ada.new@example.test"))
    assert users_by_address(ctx, "default", ADA) == []
    assert users_by_address(ctx, "default", "ada.new@example.test") == ["u1"]
    assert_projections_match_log(ctx.engine)


def test_requests_hashed_under_an_older_key_are_found_after_rotation(ctx: ServiceContext) -> None:
    old = ServiceContext(engine=ctx.engine, keys=TokenKeys(current_id="k1", keys=ctx.keys.keys), clock=ctx.clock)
    request_reset(old, RequestReset("u1", ADA))
    assert address_hmac(old.keys, ADA).startswith("k1:")
    assert users_by_address(ctx, "default", ADA) == ["u1"], "the search tries k2 and k1"
    assert candidate_hmacs(ctx.keys, ADA)[0].startswith("k2:")


def test_the_index_key_is_not_the_token_key(ctx: ServiceContext) -> None:
    import hashlib
    import hmac

    plain = hmac.new(ctx.keys.current, ADA.encode(), hashlib.sha256).hexdigest()
    assert address_hmac(ctx.keys, ADA) != f"k2:{plain}", "an HKDF-derived key, labelled for this purpose"


@pytest.mark.parametrize("bad", ["", "no-at-sign", "@example.test", "ada@", "a b@example.test", None, 42,
                                 "x" * 250 + "@example.test"])
def test_a_search_for_what_is_no_address_is_refused_without_echoing_it(ctx: ServiceContext, bad: object) -> None:
    with pytest.raises(InvalidInput) as refused:
        users_by_address(ctx, "default", bad)  # type: ignore[arg-type]
    assert str(bad) not in str(refused.value) or bad in ("", None, 42)


def test_a_bad_tenant_name_is_refused(ctx: ServiceContext) -> None:
    with pytest.raises(InvalidInput):
        users_by_address(ctx, "Not A Tenant", ADA)
