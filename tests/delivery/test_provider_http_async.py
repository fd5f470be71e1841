"""HttpMailer.send_async: a window of sends in flight over one pooled async client."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from infra.delivery.providers import (
    AsyncMailer,
    OutcomeUnknown,
    PermanentSendError,
    ProviderReceipt,
    RetryableSendError,
    SendFailed,
)
from infra.delivery.providers.http import HttpMailer
from tests.support.http_provider import FakeHttpProvider
from tests.support.emails import a_code_email

T = TypeVar("T")


def in_a_loop(mailer: HttpMailer, work: Callable[[HttpMailer], Awaitable[T]]) -> T:
    """Runs ``work`` in a fresh event loop and closes the mailer's async client there."""

    async def run() -> T:
        try:
            return await work(mailer)
        finally:
            await mailer.aclose()

    try:
        return asyncio.run(run())
    finally:
        mailer.close()


def failure_of(mailer: HttpMailer) -> SendFailed:
    async def send(mailer: HttpMailer) -> SendFailed:
        with pytest.raises(SendFailed) as failure:
            await mailer.send_async(a_code_email())
        return failure.value

    return in_a_loop(mailer, send)


def test_http_mailer_is_an_async_mailer() -> None:
    with FakeHttpProvider() as provider:
        mailer = HttpMailer(provider.url)
        assert isinstance(mailer, AsyncMailer)
        mailer.close()


def test_a_window_of_64_sends_is_in_flight_at_the_provider_at_once_and_each_is_sent_once() -> None:
    rounds = [[a_code_email() for _ in range(64)] for _ in range(2)]
    with FakeHttpProvider(keep_alive=True) as provider:
        provider.delay(0.1)

        async def send_all(mailer: HttpMailer) -> list[ProviderReceipt]:
            receipts = []
            for emails in rounds:
                receipts += await asyncio.gather(*(mailer.send_async(email) for email in emails))
            return receipts

        receipts = in_a_loop(HttpMailer(provider.url, timeout=5.0, window=64), send_all)

        assert provider.peak_in_flight >= 60
        # The second round went over the first round's connections.
        assert provider.connections <= 64
        assert provider.sends_by_key == {str(email.message_id): 1 for emails in rounds for email in emails}
        assert sorted(r.provider_message_id for r in receipts) == sorted(a.id for a in provider.accepted)


def test_the_async_client_reuses_its_connections_across_sends() -> None:
    with FakeHttpProvider(keep_alive=True) as provider:

        async def send_in_turn(mailer: HttpMailer) -> None:
            for _ in range(20):
                await mailer.send_async(a_code_email())

        in_a_loop(HttpMailer(provider.url, window=4), send_in_turn)

        assert len(provider.accepted) == 20
        assert provider.connections == 1


@pytest.mark.parametrize("status", [500, 503, 429])
def test_server_errors_and_rate_limits_say_the_provider_is_down(status: int) -> None:
    with FakeHttpProvider() as provider:
        provider.fail_next(1, status)
        failure = failure_of(HttpMailer(provider.url))

    assert isinstance(failure, RetryableSendError) and failure.provider_down


def test_a_400_refuses_this_email_only() -> None:
    with FakeHttpProvider() as provider:
        provider.fail_next(1, 400)
        failure = failure_of(HttpMailer(provider.url))

    assert isinstance(failure, PermanentSendError) and not failure.provider_down


def test_a_refused_connection_says_the_provider_is_down_with_nothing_sent() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    failure = failure_of(HttpMailer(f"http://127.0.0.1:{port}/emails", timeout=0.5))

    assert isinstance(failure, RetryableSendError) and not failure.outcome_unknown
    assert failure.provider_down and "connect failed" in str(failure)


def test_an_answer_slower_than_the_timeout_is_an_unknown_outcome_of_a_provider_down() -> None:
    with FakeHttpProvider() as provider:
        provider.delay(2.0)
        failure = failure_of(HttpMailer(provider.url, timeout=0.3))

    assert isinstance(failure, OutcomeUnknown) and failure.provider_down


def test_a_second_event_loop_gets_a_client_of_its_own_once_the_first_is_closed() -> None:
    with FakeHttpProvider() as provider:
        mailer = HttpMailer(provider.url)

        async def send_one(mailer: HttpMailer) -> None:
            await mailer.send_async(a_code_email())
            await mailer.aclose()

        asyncio.run(send_one(mailer))
        asyncio.run(send_one(mailer))
        mailer.close()

        assert len(provider.accepted) == 2
