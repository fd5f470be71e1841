"""A worker reads a request's stream from its snapshot: a user's thirtieth email costs what a new user's first does."""

from __future__ import annotations

from datetime import timedelta


from domain.reset import RequestReset
from infra.clock import ManualClock
from infra.delivery.fresh import prepare
from infra.delivery.leases import claim_due
from infra.delivery.worker import Worker
from infra.services.reset import request_reset, verify_token
from infra.services.unit_of_work import ServiceContext
from tests.delivery.test_reset_delivery import SENDER, token_in
from tests.support.mailers import RecordingMailer
from tests.support.statements import statements_sent

READS_EVENTS = "e.metadata, e.recorded_at"  # columns only the log reader selects: a fold of the history would send them


def test_preparing_the_email_of_a_user_with_a_long_history_reads_as_much_as_for_a_new_user(
    ctx: ServiceContext, clock: ManualClock
) -> None:
    for _ in range(30):  # an hour apart: past the cooldown and the hourly limit, each superseding the last
        request_reset(ctx, RequestReset("veteran", "veteran@example.test"))
        clock.advance(timedelta(hours=1))
    Worker(ctx, RecordingMailer(), sender=SENDER, batch=10).drain()
    newest = request_reset(ctx, RequestReset("veteran", "veteran@example.test"))
    request_reset(ctx, RequestReset("newcomer", "newcomer@example.test"))
    with ctx.engine.begin() as connection:
        claims = claim_due(connection, owner="w1", limit=10, now=clock.now(), policy=ctx.delivery_policy)
    by_user = {claim.row.user_id: claim for claim in claims}
    assert set(by_user) == {"veteran", "newcomer"}

    with statements_sent(ctx.engine) as read_for_the_veteran:
        veterans = prepare(ctx, by_user["veteran"], sender=SENDER)
    with statements_sent(ctx.engine) as read_for_the_newcomer:
        prepare(ctx, by_user["newcomer"], sender=SENDER)

    # One statement for the snapshot and its keys, one for the tenant's settings (sender, reset page, words):
    # the same two whatever the user's history.
    assert len(read_for_the_veteran) == len(read_for_the_newcomer) == 2, "the snapshot and its keys; the settings"
    assert not any(READS_EVENTS in sent for sent in read_for_the_veteran), "no event of the history is read"
    assert veterans.email is not None and veterans.email.recipient == "veteran@example.test"
    assert verify_token(ctx, token_in(veterans.email.text_body)).request_id == newest.request_id
