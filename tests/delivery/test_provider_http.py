"""The HTTP JSON provider against a real HTTP server that deduplicates like Resend."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from domain.errors import ConfigError
from infra.delivery.providers import (
    Mailer,
    OutcomeUnknown,
    PermanentSendError,
    ProviderReceipt,
    RetryableSendError,
)
from infra.delivery.providers.http import HttpMailer
from tests.support.http_provider import FakeHttpProvider
from tests.support.emails import a_code_email

CODE = "815274"  # stands for the secret a real email carries
API_KEY = "re_test_key_5f2b"


@pytest.fixture
def provider() -> Iterator[FakeHttpProvider]:
    with FakeHttpProvider(api_key=API_KEY) as provider:
        yield provider


@pytest.fixture
def mailer(provider: FakeHttpProvider) -> Iterator[HttpMailer]:
    with HttpMailer(provider.url, api_key=API_KEY, timeout=0.5) as mailer:
        yield mailer


def test_http_mailer_is_a_mailer(mailer: HttpMailer) -> None:
    assert isinstance(mailer, Mailer)
    assert mailer.name == "http"
    assert mailer.timeout_seconds == 0.5


def test_posts_the_email_as_json_with_its_message_id_as_idempotency_key(
    provider: FakeHttpProvider, mailer: HttpMailer
) -> None:
    email = a_code_email(CODE)

    receipt = mailer.send(email)

    [request] = provider.requests
    assert request.idempotency_key == str(email.message_id)
    assert request.authorization == f"Bearer {API_KEY}"
    assert request.payload == {
        "from": email.sender,
        "to": email.recipient,
        "subject": email.subject,
        "text": email.text_body,
        "html": email.html_body,
        "headers": {"Content-Language": "en"},
    }
    [sent] = provider.accepted
    assert receipt == ProviderReceipt(provider="http", provider_message_id=sent.id)


def test_sending_the_same_message_twice_is_one_send_with_one_id(
    provider: FakeHttpProvider, mailer: HttpMailer
) -> None:
    email = a_code_email(CODE)

    first = mailer.send(email)
    second = mailer.send(email)

    assert second == first
    assert provider.sends_by_key == {str(email.message_id): 1}
    assert provider.requests_by_key == {str(email.message_id): 2}


def test_a_replay_answered_409_with_an_id_counts_as_already_sent() -> None:
    email = a_code_email(CODE)
    with FakeHttpProvider(replay_status=409) as provider, HttpMailer(provider.url) as mailer:
        first = mailer.send(email)

        assert mailer.send(email) == first
        assert provider.sends_by_key == {str(email.message_id): 1}


def test_a_503_is_retryable_and_the_retry_sends_once(provider: FakeHttpProvider, mailer: HttpMailer) -> None:
    email = a_code_email(CODE)
    provider.fail_next(1, 503)

    with pytest.raises(RetryableSendError) as failure:
        mailer.send(email)
    mailer.send(email)

    assert failure.value.retryable and not failure.value.outcome_unknown
    assert failure.value.provider_down
    assert str(failure.value) == "http 503 (injected_failure)"
    assert provider.sends_by_key == {str(email.message_id): 1}


@pytest.mark.parametrize("status", [429, 500, 502])
def test_rate_limits_and_server_errors_are_retryable(
    provider: FakeHttpProvider, mailer: HttpMailer, status: int
) -> None:
    provider.fail_next(1, status)

    with pytest.raises(RetryableSendError) as failure:
        mailer.send(a_code_email(CODE))

    assert failure.value.provider_down


def test_a_400_is_permanent_and_does_not_quote_the_email(provider: FakeHttpProvider, mailer: HttpMailer) -> None:
    provider.fail_next(1, 400)

    with pytest.raises(PermanentSendError) as failure:
        mailer.send(a_code_email(CODE))

    assert not failure.value.retryable and not failure.value.provider_down
    assert str(failure.value) == "http 400 (injected_failure)"
    assert CODE not in str(failure.value)


def test_a_wrong_api_key_is_retryable_because_an_operator_can_fix_it(provider: FakeHttpProvider) -> None:
    with HttpMailer(provider.url, api_key="re_revoked", timeout=0.5) as mailer:
        with pytest.raises(RetryableSendError, match="refused the API key") as failure:
            mailer.send(a_code_email(CODE))

    # Every email would be refused alike: the account, not this email.
    assert failure.value.provider_down
    assert provider.accepted == []


def test_a_response_slower_than_the_timeout_is_an_unknown_outcome_that_a_retry_settles(
    provider: FakeHttpProvider, mailer: HttpMailer
) -> None:
    email = a_code_email(CODE)
    provider.delay(60)  # cut short when the provider closes

    with pytest.raises(OutcomeUnknown) as failure:
        mailer.send(email)
    # The provider still holds its answer: only the mailer's own timeout can have ended the send.
    assert provider.in_flight == 1 and provider.sends_by_key == {str(email.message_id): 1}
    assert failure.value.retryable and failure.value.outcome_unknown and failure.value.provider_down
    assert CODE not in str(failure.value)

    provider.delay(0)
    receipt = mailer.send(email)

    # The provider had sent it during the slow first attempt; the retry only
    # learns the id.
    assert provider.sends_by_key == {str(email.message_id): 1}
    assert receipt.provider_message_id == provider.accepted[0].id


def test_an_error_after_the_provider_sent_is_settled_by_the_retry(
    provider: FakeHttpProvider, mailer: HttpMailer
) -> None:
    email = a_code_email(CODE)
    provider.fail_next(1, 500, after_sending=True)

    with pytest.raises(RetryableSendError):
        mailer.send(email)
    mailer.send(email)

    assert provider.sends_by_key == {str(email.message_id): 1}


def test_a_refused_connection_is_retryable_with_nothing_sent() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens on the port any more.
    with HttpMailer(f"http://127.0.0.1:{port}/emails", timeout=0.5) as mailer:
        with pytest.raises(RetryableSendError, match="connect failed") as failure:
            mailer.send(a_code_email(CODE))

    assert not failure.value.outcome_unknown
    assert failure.value.provider_down


@pytest.mark.parametrize(
    ("url", "api_key"),
    [
        ("ftp://provider.example/emails", None),
        ("http:///emails", None),
        ("http://provider.example/emails", "re_secret_key"),
    ],
)
def test_refuses_a_bad_url_or_a_key_over_plain_http(url: str, api_key: str | None) -> None:
    with pytest.raises(ConfigError) as failure:
        HttpMailer(url, api_key=api_key)

    assert "re_secret_key" not in str(failure.value)


def test_a_mailer_shows_its_url_without_the_credentials_it_may_carry() -> None:
    mailer = HttpMailer("https://user:s3cret@api.example.test/send?key=k3y")
    try:
        assert repr(mailer) == "HttpMailer('https://***@api.example.test/send?***')"
    finally:
        mailer.close()
