"""SmtpMailer's persistent sessions: many messages per connection, from many threads at once."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from infra.delivery.providers import (
    AsyncMailer,
    OutcomeUnknown,
    PermanentSendError,
    RetryableSendError,
    message_id_header,
)
from infra.delivery.providers.smtp import SmtpMailer
from tests.support.smtp_relay import LocalController, Relay
from tests.support.emails import a_code_email
from tests.support.waiting import wait_until


def controller_of(relay: Relay) -> LocalController:
    return relay.controller  # type: ignore[attr-defined,no-any-return]


def a_mailer(port: int, **options: Any) -> SmtpMailer:
    options.setdefault("timeout", 5.0)
    return SmtpMailer("127.0.0.1", port, sender="bounces@example.com", security="none",
                      local_hostname="worker.test", **options)


def arrivals(relay: Relay) -> Counter[str]:
    """Deliveries per Message-ID: 1 each when every message arrived once."""
    return Counter(str(message["Message-ID"]) for message in relay.messages())


def test_smtp_mailer_is_an_async_mailer(relay: Relay) -> None:
    assert isinstance(a_mailer(relay.port), AsyncMailer)


def test_200_messages_from_16_threads_arrive_once_each_over_at_most_16_connections(relay: Relay) -> None:
    emails = [a_code_email() for _ in range(200)]
    mailer = a_mailer(relay.port, window=16)

    with ThreadPoolExecutor(16) as threads:
        receipts = list(threads.map(mailer.send, emails))
    mailer.close()

    assert arrivals(relay) == Counter(message_id_header(e.message_id) for e in emails)
    assert [r.provider_message_id for r in receipts] == [message_id_header(e.message_id) for e in emails]
    assert relay.connections <= 16


def test_a_421_mid_session_reconnects_and_the_message_arrives_once(relay: Relay) -> None:
    relay.hang_up_at_mail = 3  # the relay ends each session at its third MAIL FROM
    emails = [a_code_email() for _ in range(5)]
    mailer = a_mailer(relay.port)

    for email in emails:
        mailer.send(email)
    mailer.close()

    # Messages 1-2 on the first session, 3-4 on the second, 5 on the third.
    assert relay.mails_refused_421 == 2
    assert relay.connections == 3
    assert arrivals(relay) == Counter(message_id_header(e.message_id) for e in emails)


def test_a_relay_that_ends_every_session_at_once_is_tried_on_one_fresh_session_only(relay: Relay) -> None:
    relay.hang_up_at_mail = 1

    with pytest.raises(RetryableSendError, match="421") as failure:
        a_mailer(relay.port).send(a_code_email())

    assert failure.value.provider_down
    assert relay.connections == 2
    assert relay.envelopes == []


def test_a_session_the_relay_dropped_while_idle_is_replaced_and_the_message_arrives(relay: Relay) -> None:
    mailer = a_mailer(relay.port)
    mailer.send(a_code_email())
    controller_of(relay).hang_up_all()

    email = a_code_email()
    mailer.send(email)
    mailer.close()

    assert relay.connections == 2
    assert arrivals(relay)[message_id_header(email.message_id)] == 1


def test_a_550_fails_the_email_for_good_without_calling_the_provider_down(relay: Relay) -> None:
    relay.refusals["RCPT"].append("550 5.1.1 mailbox unavailable")
    mailer = a_mailer(relay.port)

    with pytest.raises(PermanentSendError) as failure:
        mailer.send(a_code_email())
    mailer.send(a_code_email())  # the session survives a refusal, after RSET
    mailer.close()

    assert not failure.value.retryable and not failure.value.provider_down
    assert relay.connections == 1
    assert len(relay.envelopes) == 1


@pytest.mark.parametrize("reply", ["450 4.2.1 mailbox busy", "451 4.3.0 try later", "452 4.5.3 too many"])
def test_a_temporary_refusal_of_the_recipient_is_about_this_email_only(relay: Relay, reply: str) -> None:
    relay.refusals["RCPT"].append(reply)

    with pytest.raises(RetryableSendError) as failure:
        a_mailer(relay.port).send(a_code_email())

    assert not failure.value.provider_down


def test_a_refused_connection_says_the_provider_is_down() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    with pytest.raises(RetryableSendError, match="connection refused") as failure:
        a_mailer(port, timeout=2.0).send(a_code_email())

    assert failure.value.provider_down


def test_a_lost_answer_to_data_is_never_sent_again_on_a_fresh_session(relay: Relay) -> None:
    relay.stall["DATA"] = 3.0

    with pytest.raises(OutcomeUnknown) as failure:
        a_mailer(relay.port, timeout=0.5).send(a_code_email())

    assert failure.value.provider_down
    assert relay.connections == 1


def test_idle_sessions_are_closed_after_a_while(relay: Relay) -> None:
    mailer = a_mailer(relay.port, idle_seconds=0.2)
    mailer.send(a_code_email())

    wait_until(lambda: not controller_of(relay).open_sessions, what="the relay's sessions to end")
    mailer.send(a_code_email())
    mailer.close()

    assert relay.connections == 2


def test_close_ends_the_idle_sessions(relay: Relay) -> None:
    mailer = a_mailer(relay.port, window=4)
    with ThreadPoolExecutor(4) as threads:
        list(threads.map(mailer.send, [a_code_email() for _ in range(8)]))
    assert controller_of(relay).open_sessions

    mailer.close()

    wait_until(lambda: not controller_of(relay).open_sessions, what="the relay's sessions to end")


def test_send_async_keeps_a_window_of_sends_in_flight_on_threads_of_its_own(relay: Relay) -> None:
    emails = [a_code_email() for _ in range(48)]
    mailer = a_mailer(relay.port, window=16)
    # The relay answers no DATA until 16 are waiting for it at once: a mailer that sent one at a time would
    # never get there. (How much faster a window is than one by one is bench/providers.py's to measure.)
    relay.held.add("DATA")

    def release_once_the_window_is_full() -> None:
        try:
            wait_until(lambda: relay.in_data == 16, what="16 sends waiting at the relay at once")
        finally:
            relay.held.clear()

    releaser = threading.Thread(target=release_once_the_window_is_full)
    releaser.start()

    async def send_all() -> None:
        try:
            await asyncio.gather(*(mailer.send_async(email) for email in emails))
        finally:
            await mailer.aclose()

    asyncio.run(send_all())
    releaser.join()

    assert arrivals(relay) == Counter(message_id_header(e.message_id) for e in emails)
    assert relay.connections <= 16
    assert relay.peak_in_data == 16, "a whole window in flight, never more"
