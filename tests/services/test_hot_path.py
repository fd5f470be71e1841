"""What one request costs the database (issue 13): the statements, transactions and round trips of each hot path.

Statements (BEGIN and COMMIT apart) and round trips are counted at the
wire, after a warm-up (this process has proven the master key, as a
running server has): deferred statements never pass SQLAlchemy's cursor.
Pipelined (infra/db/pipeline.py), a request waits for the server only where
it reads: the locks go with the read, the rows with the COMMIT. A count that
grows costs every request: say why in the commit that changes it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from uuid import uuid4

import pytest
from sqlalchemy import Engine

from domain.otp import RequestOtp
from domain.reset import RequestReset
from infra.clock import ManualClock
from infra.db.engine import Database
from infra.errors import RateLimited
from infra.services.clients import KEYS, authenticate, create_client
from infra.services.closed_counts import write_all_closed_counts
from infra.services.otp import request_otp, verify_code
from infra.services.reset import consume_token, request_reset, verify_token
from infra.services.unit_of_work import ServiceContext
from infra.services.webhook_routes import ENDPOINTS
from tests.conftest import ROOMY_SEND_LIMITS
from tests.support.keys import TEST_KEYS
from tests.support.replay import assert_projections_match_log
from tests.support.secrets import otp_code_of, reset_token_of
from tests.support.wire import at_the_wire


def cost_of(engine: Engine, call: Callable[[], object]) -> tuple[int, int, int]:
    """(statements, transactions, round trips) of one call."""
    with at_the_wire(engine) as wire:
        call()
    return len(wire.statements), wire.transactions, wire.round_trips


def warm_webhook_routes(engine: Engine) -> None:
    with engine.connect() as connection:
        ENDPOINTS.of(connection)


def new_user() -> str:
    return f"u-{uuid4().hex[:12]}"


def test_each_hot_path_runs_in_one_transaction_with_the_fewest_statements_and_waits(
    ctx: ServiceContext, engine: Engine
) -> None:
    for _ in range(2):  # warm: the master key is proven once a key exists under it
        request_reset(ctx, RequestReset(new_user(), "warm@example.test", idempotency_key=uuid4().hex))
    user = new_user()
    created = []

    def create_reset() -> None:
        created.append(request_reset(ctx, RequestReset(user, "ada@example.test", idempotency_key=uuid4().hex)))

    # Locks, the stream's read, the suppression list's look-up (sent with the count: no wait of its own), the
    # address's count, the user's new data key, the address index (its row's lock, shared with the user's OTP
    # stream, then the row, asked for before the append so that it comes back with it), the append, three new
    # rows, the index's row, the snapshot; and the tenant's settings (its link lifetime, cooldown and limits),
    # sent with the stream's read: a statement, no wait of its own. Waits: the read, the count (a full one
    # refuses before anything is written), the append (with the index's read), the COMMIT.
    assert cost_of(engine, create_reset) == (14, 1, 4)
    # The API refuses a key in flight rather than wait for it: whether the key was free comes with the read.
    as_the_api_asks = RequestReset(new_user(), "bo@example.test", idempotency_key=uuid4().hex)
    assert cost_of(engine, lambda: request_reset(ctx, as_the_api_asks, in_flight="refuse")) == (14, 1, 4)
    token = reset_token_of(engine, ctx.keys, created[0].request_id)
    # The token's owner, the lock, the stream's read: the look-up shares the decision's transaction.
    assert cost_of(engine, lambda: verify_token(ctx, token)) == (3, 1, 3)
    # ... then the append, the notice's new outbox row, the token's row (read with the append, then written),
    # the snapshot.
    # (The tenant's webhook endpoints, which a used link is told to, are read once per process every few
    # seconds, not on each call: infra/services/webhook_routes.py. Read here first, so that they are not counted.)
    warm_webhook_routes(engine)
    assert cost_of(engine, lambda: consume_token(ctx, token)) == (8, 1, 4)

    challenges = []

    def create_otp() -> None:
        challenges.append(request_otp(ctx, RequestOtp(user, "ada@example.test", idempotency_key=uuid4().hex)))

    # The user has a data key now, and the address is indexed already: the index is locked and read (with the
    # append), and not written. The tenant's settings (its purposes and rules) are read too, sent with the
    # stream's read: no wait of their own. The suppression list is looked up and the address's count taken as
    # for a reset.
    assert cost_of(engine, create_otp) == (12, 1, 4)
    code = otp_code_of(engine, ctx.keys, challenges[0].request_id)
    # The owner, the lock, the read, the append, the challenge's row (read with the append, then written),
    # the snapshot.
    warm_webhook_routes(engine)
    assert cost_of(engine, lambda: verify_code(ctx, challenges[0].request_id, code, user_id=user)) == (7, 1, 4)
    assert_projections_match_log(engine)


def test_authenticating_a_key_waits_once_and_leaves_the_connections_prepared_statements(
    ctx: ServiceContext, engine: Engine
) -> None:
    key = create_client(ctx, f"c-{uuid4().hex[:8]}").api_key
    KEYS.clear()  # a miss: the key is looked up
    # No BEGIN and no ROLLBACK: psycopg deallocates every prepared statement on a rollback (infra/db/reading.py).
    assert cost_of(engine, lambda: authenticate(engine, key)) == (1, 0, 1)


def test_serves_pass_over_closed_counts_finding_none_waits_once_and_leaves_the_prepared_statements(
    ctx: ServiceContext, engine: Engine
) -> None:
    # Once a minute, beside the API: a rollback here would make the next requests plan their statements anew.
    assert cost_of(engine, lambda: write_all_closed_counts(ctx)) == (1, 0, 1)


PREPARED = "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"


def test_every_statement_of_the_hot_paths_settles_on_a_cached_plan(
    database: Database, engine: Engine, clock: ManualClock
) -> None:
    # One connection runs the hot paths, so its prepared statements are theirs. The secrets are read on another:
    # a read-only block rolls back, and psycopg deallocates every prepared statement on a rollback.
    measured = database.engine(pool_size=1)
    ctx = ServiceContext(engine=measured, keys=TEST_KEYS, clock=clock, send_limits=ROOMY_SEND_LIMITS)
    for _ in range(12):  # psycopg prepares a statement on its 5th run; PostgreSQL weighs a generic plan after 5
        user = new_user()
        reset = request_reset(ctx, RequestReset(user, "ada@example.test", idempotency_key=uuid4().hex))
        consume_token(ctx, reset_token_of(engine, ctx.keys, reset.request_id))
        otp = request_otp(ctx, RequestOtp(user, "ada@example.test", idempotency_key=uuid4().hex))
        verify_code(ctx, otp.request_id, otp_code_of(engine, ctx.keys, otp.request_id), user_id=user)
    with measured.connect() as connection:
        prepared = connection.exec_driver_sql(PREPARED).all()
    measured.dispose()
    # A statement planned on every call costs the server more to plan than to run (the stream's read: 0.56 ms
    # against 0.15 ms, bench/RESULTS.md): arrays for keys kept PostgreSQL from ever choosing a generic plan.
    planned_every_time = [" ".join(statement.split())[:80] for statement, generic, custom in prepared
                          if generic == 0 and custom >= 10]
    assert len(prepared) >= 10
    assert planned_every_time == []


def test_a_flood_costs_its_victim_no_wait_while_refused_or_after(
    ctx: ServiceContext, engine: Engine, clock: ManualClock
) -> None:
    victim, peer = new_user(), new_user()
    for user in (victim, peer):
        for _ in range(ctx.reset_policy.hourly_limit):
            request_reset(ctx, RequestReset(user, "ada@example.test"))
            clock.advance(ctx.reset_policy.cooldown)

    def refused() -> None:
        with pytest.raises(RateLimited):
            request_reset(ctx, RequestReset(victim, "ada@example.test"))

    refused()  # the first refusal of the run is logged; the ones after it are counted
    # The lock, the tenant's settings (its hourly limit) and the read, then the count, which goes with the COMMIT.
    assert cost_of(engine, refused) == (4, 1, 2)
    clock.advance(timedelta(hours=1))
    peers = cost_of(engine, lambda: request_reset(ctx, RequestReset(peer, "ada@example.test")))
    # The counts came with the stream's read: emptying them is one statement more, and no wait.
    victims = cost_of(engine, lambda: request_reset(ctx, RequestReset(victim, "ada@example.test")))
    assert victims == (peers[0] + 1, 1, peers[2])
    assert_projections_match_log(engine)
