"""Another tenant's id costs exactly what an unknown id costs: the same statements, in the same order.

An id of another tenant is answered as unknown; if finding that out took
more work (reading the other tenant's events, then deciding they are not
ours), the time of the answer would tell which ids exist elsewhere. So each
look-up by id is made twice for tenant ``shop``, once with an id of tenant
``acme`` and once with an id nobody has, and what reached PostgreSQL (the
SQL at the cursor, the commands and waits at the wire) must be the same, as
must the answer, the id apart. Only the number of rows a statement returns
may differ: acme's few rows come back and are set aside unread.
"""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID, uuid4

import pytest
from sqlalchemy import Engine

from domain.errors import CodeRejected, NotFound, TokenInvalid
from domain.otp import RequestOtp
from domain.reset import RequestReset
from infra.delivery.redrive import Selection, redrive
from infra.review.history import explain
from infra.review.timeline import message_timeline, request_timeline
from infra.services.otp import request_otp, verify_code
from infra.services.reset import request_reset, verify_token
from infra.services.unit_of_work import ServiceContext
from tests.support.keys import TEST_KEYS
from tests.support.secrets import otp_code_of, reset_token_of
from tests.support.statements import statements_sent
from tests.support.wire import at_the_wire

ADMIN = {"actor": "client:shop-admin", "client": "shop-admin"}
AN_UNKNOWN_TOKEN = "A" * 43  # the shape of a token, but no link's
AN_UNKNOWN_CODE = "000000"


def cost_and_answer(engine: Engine, call: Callable[[], object], the_id: object) -> tuple[object, ...]:
    """What ``call`` sent the database (SQL, command tags, round trips) and how it was refused, ``the_id`` apart."""
    with at_the_wire(engine) as wire, statements_sent(engine) as sql:
        with pytest.raises((NotFound, TokenInvalid, CodeRejected)) as refused:
            call()
    words = refused.value.message.replace(str(the_id), "<id>")
    commands = [tag.split()[0] for tag in wire.statements]  # "SELECT 2" and "SELECT 0" are the same statement
    return sql, commands, wire.round_trips, type(refused.value), words


def assert_same_cost(engine: Engine, ask: Callable[[object], object], foreign: object, unknown: object) -> None:
    for the_id in (foreign, unknown):  # warm: the master key proven, the caches filled, as in a running server
        cost_and_answer(engine, lambda the_id=the_id: ask(the_id), the_id)
    of_another_tenant = cost_and_answer(engine, lambda: ask(foreign), foreign)
    of_nobody = cost_and_answer(engine, lambda: ask(unknown), unknown)
    assert of_another_tenant == of_nobody
    assert of_nobody[0], "the look-up was made"


@pytest.fixture
def acme(ctx: ServiceContext) -> dict[str, UUID]:
    """A reset request and an OTP challenge of tenant acme's user u1, with the ids of their emails."""
    reset = request_reset(ctx, RequestReset("u1", "ada@acme.test", tenant="acme"))
    otp = request_otp(ctx, RequestOtp("u1", "ada@acme.test", tenant="acme"))
    return {"request": reset.request_id, "message": reset.message_id, "challenge": otp.request_id}


def test_the_timeline_of_another_tenants_request_or_message_costs_what_an_unknown_ones_does(
    ctx: ServiceContext, engine: Engine, acme: dict[str, UUID]
) -> None:
    assert_same_cost(engine, lambda the_id: request_timeline(ctx, the_id, tenant="shop"), acme["request"], uuid4())
    assert_same_cost(engine, lambda the_id: message_timeline(ctx, the_id, tenant="shop"), acme["message"], uuid4())


def test_explaining_another_tenants_request_or_message_costs_what_an_unknown_ones_does(
    ctx: ServiceContext, engine: Engine, acme: dict[str, UUID]
) -> None:
    now = ctx.clock.now()
    assert_same_cost(engine, lambda the_id: explain(engine, request_id=the_id, tenant="shop", now=now),
                     acme["request"], uuid4())
    assert_same_cost(engine, lambda the_id: explain(engine, message_id=the_id, tenant="shop", now=now),
                     acme["message"], uuid4())


def test_another_tenants_link_costs_what_an_unknown_link_does(
    ctx: ServiceContext, engine: Engine, acme: dict[str, UUID]
) -> None:
    token = reset_token_of(engine, TEST_KEYS, acme["request"])
    assert_same_cost(engine, lambda the_token: verify_token(ctx, the_token, tenant="shop"), token, AN_UNKNOWN_TOKEN)


def test_another_tenants_challenge_costs_what_an_unknown_challenge_does(
    ctx: ServiceContext, engine: Engine, acme: dict[str, UUID]
) -> None:
    code = otp_code_of(engine, TEST_KEYS, acme["challenge"])
    assert_same_cost(engine, lambda the_id: verify_code(ctx, the_id, code, user_id="u1", tenant="shop"),
                     acme["challenge"], uuid4())


def test_redriving_another_tenants_message_costs_what_an_unknown_message_does(
    ctx: ServiceContext, engine: Engine, acme: dict[str, UUID]
) -> None:
    assert_same_cost(engine, lambda the_id: redrive(ctx, Selection(message_id=the_id, tenant="shop"),
                                                    reason="customer asked", metadata=ADMIN),
                     acme["message"], uuid4())
