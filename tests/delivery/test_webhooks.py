"""Webhooks through the outbox: each event type reaches a real receiver, signed, retried with one id, never lost.

The receiver (tests/support/webhook_receiver.py) checks every signature with
its own implementation of the Standard Webhooks specification.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from datetime import timedelta
from uuid import uuid4
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from sqlalchemy import Engine, Row, text

from domain.delivery import DeliveryPolicy
from domain.email import EmailQueued, LeaseClaimed, ProviderAccepted
from domain.otp import RequestOtp
from domain.reset import RequestReset
from domain.webhooks import EVENT_TYPES, webhook_stream
from infra.clock import ManualClock, SystemClock
from infra.delivery.worker import Worker
from infra.eventlog.subject_keys import MasterKeys, bind_master_keys
from domain.feedback import check_feedback
from infra.services.feedback import MessageRef, record_feedback
from infra.services.otp import request_otp, verify_code
from infra.services.support import invalidate_user
from infra.services.privacy import forget
from infra.services.reset import consume_token, request_reset
from infra.services.tenants import create_tenant
from infra.services.unit_of_work import ServiceContext, append_and_fold
from infra.services.webhooks import add_endpoint, remove_endpoint, rotate_endpoint
from tests.support.cli import cli_outcome
from tests.support.log_reading import stream_events
from tests.support.mailers import RecordingMailer, RefusingMailer
from tests.support.replay import assert_projections_match_log
from tests.support.secrets import otp_code_of, reset_token_of
from tests.support.waiting import wait_until
from tests.support.webhook_receiver import Receiver, running_receiver, verify

SENDER = "authledger <no-reply@app.test>"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as running:
        yield running


def listening(ctx: ServiceContext, receiver: Receiver, *events: str) -> str:
    secret = add_endpoint(ctx, "default", receiver.url, events).secret
    receiver.secrets.append(secret)
    return secret


def drain(ctx: ServiceContext, mailer: RecordingMailer | None = None) -> dict[str, int]:
    return Worker(ctx, mailer or RecordingMailer(), sender=SENDER).drain()


def test_every_event_type_reaches_the_receiver_signed_with_ids_and_no_secret(
    ctx: ServiceContext, engine: Engine, receiver: Receiver
) -> None:
    secret = listening(ctx, receiver)
    reset = request_reset(ctx, RequestReset("ada", "ada@example.test"))
    drain(ctx)  # the link: email.accepted
    consume_token(ctx, reset_token_of(engine, ctx.keys, reset.request_id))  # reset.consumed
    challenge = request_otp(ctx, RequestOtp("ada", "ada@example.test"))
    drain(ctx)
    verify_code(ctx, challenge.request_id, otp_code_of(engine, ctx.keys, challenge.request_id), user_id="ada")
    request_reset(ctx, RequestReset("bo", "bo@example.test"))
    drain(ctx, RefusingMailer())  # email.failed
    capped = attrs.evolve(ctx, delivery_policy=DeliveryPolicy(max_attempts=1))
    request_reset(capped, RequestReset("cy", "cy@example.test"))
    busy = RecordingMailer()
    busy.fail_next = 1
    drain(capped, busy)  # email.abandoned
    forget(ctx, "ada", reason="ticket 42")  # user.erased
    bounced = request_reset(ctx, RequestReset("dee", "dee@example.test"))
    complained = request_reset(ctx, RequestReset("eve", "eve@example.test"))
    drain(ctx)
    record_feedback(ctx, MessageRef(message_id=bounced.message_id),  # email.bounced
                    check_feedback("bounce", "generic", permanent=True, diagnostic="550 5.1.1 no such user"),
                    tenant="default")
    record_feedback(ctx, MessageRef(message_id=complained.message_id), check_feedback("complaint", "generic"),
                    tenant="default")  # email.complained
    withdrawn = request_reset(ctx, RequestReset("fay", "fay@example.test"))
    invalidate_user(ctx, "default", "fay", reason="phished, ticket 7")  # user.invalidated
    drain(ctx)

    calls = receiver.accepted()
    assert receiver.types() == set(EVENT_TYPES)
    assert all(call.verified_by == (secret,) for call in calls), "every call verified by the receiver's own check"
    assert len({call.webhook_id for call in calls}) == len(calls), "one call per fact"
    consumed = next(call for call in calls if call.type == "reset.consumed")
    assert consumed.payload["data"] == {"tenant": "default", "user_id": "ada", "request_id": str(reset.request_id)}
    told = {call.type: call.payload["data"] for call in calls}
    assert told["email.bounced"]["message_id"] == str(bounced.message_id)
    assert told["email.complained"]["message_id"] == str(complained.message_id)
    assert told["user.invalidated"] == {"tenant": "default", "user_id": "fay", "request_id": str(withdrawn.request_id),
                                        "reason": "phished, ticket 7"}
    for call in calls:
        assert "@" not in call.body.decode(), "never an address"
    assert_projections_match_log(engine)


def test_a_receiver_answering_500_gets_retries_with_the_same_webhook_id_until_it_accepts(
    ctx: ServiceContext, clock: ManualClock, engine: Engine, receiver: Receiver
) -> None:
    listening(ctx, receiver, "email.accepted")
    receiver.status = 500
    request_reset(ctx, RequestReset("ada", "ada@example.test"))
    drain(ctx)
    for _ in range(3):
        clock.advance(ctx.delivery_policy.backoff_cap)
        drain(ctx)
    receiver.status = 204
    clock.advance(ctx.delivery_policy.backoff_cap)
    drain(ctx)

    statuses = [call.status for call in receiver.calls]
    assert statuses == [500, 500, 500, 500, 204]
    assert len({call.webhook_id for call in receiver.calls}) == 1
    assert len({call.headers["webhook-timestamp"] for call in receiver.calls}) == 5, "signed anew at each call"
    [delivery_id] = [row.message_id for row in _webhook_rows(engine)]
    kinds = [type(event).__name__ for event in stream_events(engine, webhook_stream(delivery_id))]
    assert kinds == ["WebhookQueued"] + ["LeaseClaimed", "SendAttemptFailed"] * 4 + ["LeaseClaimed",
                                                                                     "ProviderAccepted"]
    assert_projections_match_log(engine)


def test_a_receiver_down_for_sixty_seconds_loses_nothing_and_its_circuit_spares_the_others(
    ctx: ServiceContext, clock: ManualClock, engine: Engine, receiver: Receiver
) -> None:
    listening(ctx, receiver, "email.accepted")
    receiver.down()
    for n in range(10):
        request_reset(ctx, RequestReset(f"user-{n}", f"u{n}@example.test"))
    worker = Worker(ctx, RecordingMailer(), sender=SENDER)
    assert worker.drain()["sent"] == 10  # the emails themselves go out: the endpoint is not the mail provider
    for _ in range(6):  # sixty seconds of the receiver's outage, in the worker's time
        clock.advance(timedelta(seconds=10))
        worker.drain()
    [breaker] = worker.endpoint_breakers.values()
    assert breaker.state == "open"
    receiver.up()
    for _ in range(4):
        clock.advance(ctx.delivery_policy.backoff_cap)
        worker.drain()

    assert len({call.webhook_id for call in receiver.accepted()}) == 10, "every fact delivered once back"
    assert len(receiver.accepted()) == 10
    assert {row.state for row in _webhook_rows(engine)} == {"sent"}
    assert breaker.state == "closed"
    assert_projections_match_log(engine)


def test_after_rotation_each_call_carries_both_signatures_and_a_removed_endpoint_is_not_called(
    ctx: ServiceContext, engine: Engine, receiver: Receiver
) -> None:
    old = listening(ctx, receiver, "email.accepted")
    [endpoint_id] = [row[0] for row in engine.connect().execute(text("SELECT endpoint_id FROM webhook_endpoints"))]
    new = rotate_endpoint(ctx, "default", endpoint_id).secret
    receiver.secrets = [new]
    request_reset(ctx, RequestReset("ada", "ada@example.test"))
    drain(ctx)
    [call] = receiver.calls
    assert len(call.headers["webhook-signature"].split(" ")) == 2
    assert call.verified_by == (new,)
    receiver.secrets = [old]
    assert receiver.calls[0].verified_by == (new,)  # kept as it was checked; check it again under the old one
    assert verify(old, call.headers, call.body)

    remove_endpoint(ctx, "default", endpoint_id)
    request_reset(ctx, RequestReset("bo", "bo@example.test"))
    drain(ctx)
    assert len(receiver.calls) == 1


def _webhook_rows(engine: Engine) -> list[Row[Any]]:
    with engine.connect() as connection:
        return list(connection.execute(text("SELECT * FROM email_outbox WHERE flow = 'webhook'")))


def test_explain_tells_each_attempt_of_a_delivery_and_redrive_sends_it_again_with_the_same_id(
    ctx: ServiceContext, clock: ManualClock, engine: Engine, env: dict[str, str | None], receiver: Receiver
) -> None:
    listening(ctx, receiver, "email.accepted")
    capped = attrs.evolve(ctx, delivery_policy=DeliveryPolicy(max_attempts=2))
    receiver.status = 500
    request_reset(capped, RequestReset("ada", "ada@example.test"))
    drain(capped)
    clock.advance(ctx.delivery_policy.backoff_cap)
    drain(capped)
    [row] = _webhook_rows(engine)
    assert row.state == "abandoned"

    code, told = cli_outcome(env, "explain", "--message-id", str(row.message_id))
    assert code == 0, told
    assert "Webhook email.accepted (msg_" in told
    assert "Attempt 1 failed: webhook endpoint answered 500; retry at" in told
    assert "Attempt 2 failed: webhook endpoint answered 500; no retry." in told
    assert "abandoned after 2 attempts" in told

    receiver.status = 204
    code, out = cli_outcome(env, "outbox", "retry", "--message-id", str(row.message_id), "--reason",
                            "receiver fixed (T-9)", "--yes")
    assert code == 0, out
    drain(capped)
    assert [call.status for call in receiver.calls] == [500, 500, 204]
    assert len({call.webhook_id for call in receiver.calls}) == 1
    code, told = cli_outcome(env, "explain", "--message-id", str(row.message_id))
    assert "Attempt 1 delivered: the endpoint answered http 204." in told
    assert_projections_match_log(engine)


def test_an_email_outcome_appended_outside_the_worker_is_told_too(
    ctx: ServiceContext, engine: Engine, receiver: Receiver
) -> None:
    # As provider feedback records a bounce on the email's stream later, with no lease: here an accept.
    listening(ctx, receiver, "email.accepted")
    now, batches = ctx.clock.now(), []
    for n in range(2):
        message_id, token = uuid4(), uuid4()
        batches.append((f"email:{message_id}", 0, [
            EmailQueued(message_id, "reset", "reset_link", f"u{n}", uuid4(), f"u{n}@example.test", now),
            LeaseClaimed(message_id, "w1", token, now, now + timedelta(seconds=45), 1),
            ProviderAccepted(message_id, token, 1, now, "smtp", f"id-{n}", "k2"),
        ]))
    with engine.begin() as connection:
        append_and_fold(connection, batches)
    drain(ctx)
    assert [call.type for call in receiver.accepted()] == ["email.accepted", "email.accepted"]
    assert {call.payload["data"]["user_id"] for call in receiver.accepted()} == {"u0", "u1"}


def test_another_tenants_delivery_is_explained_as_one_that_does_not_exist(
    ctx: ServiceContext, clock: ManualClock, engine: Engine, env: dict[str, str | None], receiver: Receiver
) -> None:
    create_tenant(ctx, "acme")
    receiver.secrets.append(add_endpoint(ctx, "acme", receiver.url).secret)
    request_reset(ctx, RequestReset("ada", "ada@example.test", tenant="acme"))
    drain(ctx)
    [row] = _webhook_rows(engine)
    code, told = cli_outcome(env, "explain", "--message-id", str(row.message_id), "--tenant", "acme")
    assert code == 0 and "Attempt 1 delivered" in told
    code, other = cli_outcome(env, "explain", "--message-id", str(row.message_id))  # asked as the default tenant
    nobody = str(uuid4())
    unknown_code, unknown = cli_outcome(env, "explain", "--message-id", nobody)
    assert code == unknown_code != 0
    assert other.replace(str(row.message_id), "<id>") == unknown.replace(nobody, "<id>")


def test_a_running_worker_is_woken_for_a_new_delivery_and_sends_it_without_polling(
    ctx: ServiceContext, receiver: Receiver
) -> None:
    live = attrs.evolve(ctx, clock=SystemClock())
    listening(live, receiver, "reset.consumed")
    worker = Worker(live, RecordingMailer(), sender=SENDER, poll_seconds=3600)  # only a NOTIFY can wake it
    running = threading.Thread(target=worker.run)
    running.start()
    try:
        reset = request_reset(live, RequestReset("ada", "ada@example.test"))
        token = reset_token_of(live.engine, live.keys, reset.request_id)
        consume_token(live, token)
        wait_until(lambda: receiver.types() == {"reset.consumed"}, what="the webhook of the used link")
    finally:
        worker.stop()
        running.join(timeout=30)
    [call] = receiver.accepted()
    assert call.payload["data"]["request_id"] == str(reset.request_id)


def test_a_secret_no_configured_master_key_opens_is_retried_and_told_while_mail_goes_on(
    ctx: ServiceContext, clock: ManualClock, engine: Engine, receiver: Receiver
) -> None:
    # Sealed under a master key ("m2") that the worker's configuration no longer holds.
    sealed_elsewhere = attrs.evolve(ctx, engine=bind_master_keys(
        engine, lambda: MasterKeys({"m2": b"n" * 32, "test": b"m" * 32})))
    add_endpoint(sealed_elsewhere, "default", receiver.url, ["email.accepted"])
    request_reset(ctx, RequestReset("ada", "ada@example.test"))
    request_reset(ctx, RequestReset("bo", "bo@example.test"))

    assert drain(ctx)["sent"] == 2
    clock.advance(ctx.delivery_policy.backoff_cap)  # the deliveries due again, with a new email: one claim
    request_reset(ctx, RequestReset("cy", "cy@example.test"))
    assert drain(ctx)["sent"] == 1, "the email in the group is sent; the deliveries fail beside it"

    assert receiver.calls == []
    rows = _webhook_rows(engine)
    assert {(row.state, row.attempt_count) for row in rows} == {("pending", 2), ("pending", 1)}
    assert all("'m2'" in row.last_error for row in rows), "the missing key is named"


def test_a_receiver_answering_an_endless_body_is_delivered_without_being_read_to_its_end(
    ctx: ServiceContext, engine: Engine
) -> None:
    written: list[int] = []

    class Endless(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            self.send_response(200)
            self.send_header("content-length", str(1 << 30))
            self.end_headers()
            sent = 0
            try:
                while sent < 1 << 30:
                    self.wfile.write(b"x" * 65536)
                    sent += 65536
            except OSError:  # the worker closed the connection: it stopped reading
                pass
            written.append(sent)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        add_endpoint(ctx, "default", f"http://127.0.0.1:{server.server_address[1]}/hooks", ["email.accepted"])
        request_reset(ctx, RequestReset("ada", "ada@example.test"))
        drain(ctx)
        wait_until(lambda: written or None, what="the receiver to stop writing")
    finally:
        server.shutdown()
        server.server_close()
    assert [row.state for row in _webhook_rows(engine)] == ["sent"]
    assert written[0] < 1 << 30, "the worker did not read a gigabyte"
