"""Provider feedback on an email's stream, and the suppression list it feeds, against PostgreSQL."""

from __future__ import annotations

from uuid import uuid4

import pytest
from sqlalchemy import text

from domain.errors import NotFound, RecipientSuppressed
from domain.feedback import check_feedback
from domain.otp import RequestOtp
from domain.reset import RequestReset
from infra.services.feedback import MessageRef, record_feedback
from infra.services.otp import request_otp
from infra.services.reset import request_reset
from infra.services.suppressions import lift, list_suppressions
from infra.services.tenants import create_tenant
from infra.services.unit_of_work import ServiceContext
from tests.feedback.support import explained, sent_reset
from tests.http.support import log_size
from tests.support.replay import assert_projections_match_log

HARD_BOUNCE = check_feedback("bounce", "generic", permanent=True,
                             diagnostic="550 5.1.1 <ada@example.test>: no such user")


def test_a_permanent_bounce_is_told_by_explain_and_suppresses_the_address(ctx: ServiceContext) -> None:
    message_id = sent_reset(ctx, "42", "ada@example.test")

    recorded = record_feedback(ctx, MessageRef(provider_message_id=f"rec-{message_id}"), HARD_BOUNCE,
                               tenant="default")

    assert recorded.recorded and recorded.suppressed and recorded.message_id == message_id
    told = explained(ctx, message_id)
    assert any("bounced for good" in s and "550 5.1.1 <ada@example.test>: no such user" in s for s in told), told
    assert any("suppression list" in s for s in told), told
    [listed] = list_suppressions(ctx, "default")
    assert (listed.user_id, listed.reason, listed.addresses) == ("42", "bounce", 1)
    assert_projections_match_log(ctx.engine)


def test_the_next_create_to_a_suppressed_address_is_refused_and_writes_nothing(ctx: ServiceContext) -> None:
    message_id = sent_reset(ctx, "42", "ada@example.test")
    record_feedback(ctx, MessageRef(message_id=message_id), HARD_BOUNCE, tenant="default")
    before = log_size(ctx.engine)

    with pytest.raises(RecipientSuppressed):
        request_reset(ctx, RequestReset("7", "ADA@example.test"))  # another user, the same address as hashed
    with pytest.raises(RecipientSuppressed):
        request_otp(ctx, RequestOtp("42", "ada@example.test"))

    assert log_size(ctx.engine) == before
    request_reset(ctx, RequestReset("42", "bob@example.test"))  # another address goes through


def test_lifting_the_suppression_lets_the_create_through(ctx: ServiceContext) -> None:
    message_id = sent_reset(ctx, "42", "ada@example.test")
    record_feedback(ctx, MessageRef(message_id=message_id), check_feedback("complaint", "generic"), tenant="default")

    assert lift(ctx, "default", "ada@example.test", actor="operator:ops", reason="ticket 12: user asked again") == 1

    request_reset(ctx, RequestReset("7", "ada@example.test"))
    assert list_suppressions(ctx, "default") == []
    assert_projections_match_log(ctx.engine)


def test_the_same_report_twice_records_it_once(ctx: ServiceContext) -> None:
    message_id = sent_reset(ctx, "42", "ada@example.test")
    ref = MessageRef(message_id=message_id)

    first = record_feedback(ctx, ref, HARD_BOUNCE, tenant="default")
    size = log_size(ctx.engine)
    again = record_feedback(ctx, ref, HARD_BOUNCE, tenant="default")

    assert first.recorded and not again.recorded
    assert log_size(ctx.engine) == size


def test_a_transient_bounce_or_a_delivery_suppresses_nothing(ctx: ServiceContext) -> None:
    message_id = sent_reset(ctx, "42", "ada@example.test")
    ref = MessageRef(message_id=message_id)

    soft = record_feedback(ctx, ref, check_feedback("bounce", "generic", permanent=False,
                                                    diagnostic="452 4.2.2 mailbox full"), tenant="default")
    delivered = record_feedback(ctx, ref, check_feedback("delivered", "generic"), tenant="default")

    assert soft.recorded and delivered.recorded and not soft.suppressed and not delivered.suppressed
    told = explained(ctx, message_id)
    assert any("bounced for now" in s and "mailbox full" in s for s in told), told
    assert any("was delivered to the recipient's mail server" in s for s in told), told
    request_reset(ctx, RequestReset("7", "ada@example.test"))


def test_another_tenants_message_is_answered_as_an_unknown_one(ctx: ServiceContext) -> None:
    create_tenant(ctx, "acme")
    message_id = sent_reset(ctx, "42", "ada@example.test", tenant="acme")
    size = log_size(ctx.engine)

    for ref in (MessageRef(message_id=message_id), MessageRef(provider_message_id=f"rec-{message_id}"),
                MessageRef(message_id=uuid4())):
        with pytest.raises(NotFound) as refused:
            record_feedback(ctx, ref, HARD_BOUNCE, tenant="default")
        assert str(refused.value) == "no email with that id is known"
    assert log_size(ctx.engine) == size


def test_erasure_leaves_no_readable_suppression(ctx: ServiceContext) -> None:
    from infra.services.privacy import forget

    message_id = sent_reset(ctx, "42", "ada@example.test")
    record_feedback(ctx, MessageRef(message_id=message_id), HARD_BOUNCE, tenant="default")

    forget(ctx, "42", reason="ticket 9: the user asked to be forgotten")

    with ctx.engine.connect() as connection:
        assert connection.execute(text("SELECT hashes FROM suppressions")).scalars().all() == [""]
    request_reset(ctx, RequestReset("7", "ada@example.test"))  # nothing of the erased user's address refuses it
    assert_projections_match_log(ctx.engine)


def test_the_same_webhook_posted_by_eight_threads_at_once_is_recorded_once(ctx: ServiceContext) -> None:
    import threading

    message_id = sent_reset(ctx, "42", "ada@example.test")
    start, outcomes = threading.Barrier(8), []

    def post() -> None:
        start.wait()
        outcomes.append(record_feedback(ctx, MessageRef(provider_message_id=f"rec-{message_id}"), HARD_BOUNCE,
                                        tenant="default").recorded)

    threads = [threading.Thread(target=post) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(outcomes) == [False] * 7 + [True]
    with ctx.engine.connect() as connection:
        told = connection.execute(text("SELECT event_type FROM events WHERE stream_id = :s ORDER BY stream_version"),
                                  {"s": f"email:{message_id}"}).scalars().all()
    assert told[-2:] == ["ProviderBounced", "AddressSuppressed"] and told.count("ProviderBounced") == 1
    assert_projections_match_log(ctx.engine)


def test_history_and_the_timeline_tell_the_bounce_too(ctx: ServiceContext) -> None:
    from infra.review.history import history
    from infra.review.timeline import message_timeline

    message_id = sent_reset(ctx, "42", "ada@example.test")
    record_feedback(ctx, MessageRef(message_id=message_id), HARD_BOUNCE, tenant="default")

    told = [f.sentence for f in history(ctx.engine, "42", now=ctx.clock.now()).findings]
    rows = message_timeline(ctx, message_id).as_json()["events"]

    assert any("bounced for good" in s for s in told), told
    payloads = {r["type"]: r["payload"] for r in rows}
    # A reviewer reads the diagnostic as the address, in plain text; the suppressed hash stays withheld.
    assert payloads["ProviderBounced"]["diagnostic"] == "550 5.1.1 <ada@example.test>: no such user"
    assert payloads["AddressSuppressed"]["address_hmac"] == "[withheld]"


def test_a_suppressed_address_is_refused_as_such_when_its_hourly_count_is_full_too(ctx: ServiceContext) -> None:
    import attrs

    from domain.send_limits import SendLimits

    limited = attrs.evolve(ctx, send_limits=SendLimits(per_address=2, per_address_per_ip=1))
    message_id = sent_reset(limited, "42", "ada@example.test")
    request_reset(limited, RequestReset("43", "ada@example.test"))  # the address's second email: its count is full
    record_feedback(limited, MessageRef(message_id=message_id), HARD_BOUNCE, tenant="default")

    with pytest.raises(RecipientSuppressed):  # not RateLimited: waiting would not help
        request_reset(limited, RequestReset("44", "ada@example.test"))
