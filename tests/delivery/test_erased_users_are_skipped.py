"""Email accepted for a user who is then erased is skipped as "erased" and never reaches the provider.

The worker reads each request fresh before it renders its email; once the
user's key is destroyed, the address and the nonce read [erased], so there
is nothing to send and no secret to derive. Shown with a real provider, a
Maildir on disk: what was delivered before the erasure stays the only mail.
"""

from __future__ import annotations

import mailbox
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from sqlalchemy import Engine, text

from domain.email import DeliverySkipped, email_stream
from domain.otp import RequestOtp
from domain.reset import RequestReset
from domain.reset_events import ResetCompleted
from infra.clock import ManualClock
from infra.delivery.providers.maildir import MaildirMailer
from infra.delivery.worker import Worker
from infra.services.otp import request_otp
from infra.services.privacy import forget
from infra.services.reset import consume_token, request_reset
from infra.services.unit_of_work import ServiceContext
from tests.support.log_reading import stream_events

ADA = "ada.lovelace@example.test"
SENDER = "authledger <no-reply@app.test>"
OUTBOX = text("SELECT state, skip_reason FROM email_outbox WHERE message_id = :message_id")


def test_emails_queued_before_an_erasure_are_skipped_as_erased_and_never_delivered(
    ctx: ServiceContext, clock: ManualClock, engine: Engine, tmp_path: Path
) -> None:
    maildir = MaildirMailer(tmp_path / "mail", "bounces@app.test")
    first = request_reset(ctx, RequestReset("1", ADA))
    assert Worker(ctx, maildir, sender=SENDER).drain() == {"sent": 1}
    [delivered] = mailbox.Maildir(tmp_path / "mail", create=False).keys()
    body = mailbox.Maildir(tmp_path / "mail", create=False).get_bytes(delivered).decode()
    link = next(line for line in body.splitlines() if line.startswith("https://app.test/reset?"))
    consume_token(ctx, parse_qs(urlsplit(link).query)["token"][0])  # queues a "password changed" notice
    clock.advance(120)
    link_again = request_reset(ctx, RequestReset("1", ADA))
    code = request_otp(ctx, RequestOtp("1", ADA, purpose="login"))

    assert forget(ctx, "1", reason="ticket 36").recorded
    tally = Worker(ctx, maildir, sender=SENDER).drain()

    assert tally == {"skipped": 3}
    assert mailbox.Maildir(tmp_path / "mail", create=False).keys() == [delivered], "nothing delivered after"
    [notice] = [e.notice_message_id for e in stream_events(engine, "reset-user:1") if isinstance(e, ResetCompleted)]
    with engine.connect() as connection:
        for message_id in (notice, link_again.message_id, code.message_id):
            assert tuple(connection.execute(OUTBOX, {"message_id": message_id}).one()) == ("skipped", "erased")
            skipped = stream_events(engine, email_stream(message_id))[-1]
            assert isinstance(skipped, DeliverySkipped) and skipped.reason == "erased"
    assert first.message_id not in (notice, link_again.message_id, code.message_id)
