"""The webhook rules with no database: signing as the specification says, rotation overlap, what maps to what."""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest

from domain.email import ProviderAccepted, SendAttemptFailed
from domain.errors import InvalidInput, NotFound
from domain.otp_events import OtpChallengeVerified
from domain.reset_events import ResetCompleted
from domain.webhooks import (
    EVENT_TYPES,
    MAX_ENDPOINTS,
    ROTATION_OVERLAP,
    SealedSecret,
    WebhookEvent,
    body_of,
    check_event_types,
    decide_add,
    decide_remove,
    decide_rotate,
    deliveries,
    email_event_of,
    fold_endpoints,
    headers,
    secret_bytes,
    secret_text,
    user_event_of,
)

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
SEALED = SealedSecret("sec_1", "m1", "c2VhbGVk")
SEALED_2 = SealedSecret("sec_2", "m1", "c2VhbGVkMg==")
EP = "ep_" + "a" * 32


def test_a_signature_is_the_specifications_hmac_of_id_timestamp_and_body() -> None:
    # The specification's own example (Standard Webhooks, "Verifying webhooks" section).
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = b'{"test": 2432232314}'
    signed = headers([secret_bytes(secret)], "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body)
    assert signed["webhook-signature"] == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_every_live_secret_signs_space_separated_each_checkable_on_its_own() -> None:
    one, two = b"1" * 24, b"2" * 24
    signed = headers([one, two], "msg_x", 1700000000, b"{}")
    for key, part in zip((one, two), signed["webhook-signature"].split(" "), strict=True):
        digest = hmac.new(key, b"msg_x.1700000000.{}", hashlib.sha256).digest()
        assert part == "v1," + base64.b64encode(digest).decode()


def test_a_secret_round_trips_through_its_whsec_text() -> None:
    assert secret_bytes(secret_text(b"\x00" * 24)) == b"\x00" * 24
    assert secret_text(b"k" * 24).startswith("whsec_")


def test_after_a_rotation_both_secrets_sign_until_the_overlap_ends_then_only_the_new() -> None:
    events = decide_add(fold_endpoints([]), endpoint_id=EP, tenant="t", url="https://a.test", event_types=(),
                        secret=SEALED, now=NOW)
    events += decide_rotate(fold_endpoints(events), EP, secret=SEALED_2, now=NOW)
    endpoint = fold_endpoints(events).by_id[EP]
    assert endpoint.signing_secrets(NOW + ROTATION_OVERLAP - timedelta(seconds=1)) == [SEALED_2, SEALED]
    assert endpoint.signing_secrets(NOW + ROTATION_OVERLAP) == [SEALED_2]


def test_a_removed_endpoint_hears_nothing_and_cannot_be_rotated_or_removed_again() -> None:
    events = decide_add(fold_endpoints([]), endpoint_id=EP, tenant="t", url="https://a.test",
                        event_types=("otp.verified",), secret=SEALED, now=NOW)
    assert fold_endpoints(events).by_id[EP].hears("otp.verified")
    assert not fold_endpoints(events).by_id[EP].hears("email.accepted")
    events += decide_remove(fold_endpoints(events), EP, now=NOW)
    assert not fold_endpoints(events).by_id[EP].hears("otp.verified")
    with pytest.raises(NotFound):
        decide_rotate(fold_endpoints(events), EP, secret=SEALED_2, now=NOW)


def test_unknown_event_types_are_refused_by_name() -> None:
    assert check_event_types(["otp.verified", "email.accepted"]) == ("email.accepted", "otp.verified")
    with pytest.raises(InvalidInput, match="'email.opened'"):
        check_event_types(["email.opened"])


def test_facts_of_a_users_streams_map_to_webhook_events_with_the_apps_own_user_id() -> None:
    request_id, event_id = uuid4(), uuid4()
    consumed = user_event_of("ResetCompleted", "reset-user:acme u-1", ResetCompleted(request_id, "acme u-1", NOW,
                             uuid4()), event_id=event_id)
    assert consumed == WebhookEvent("reset.consumed", "acme",
                                    {"tenant": "acme", "user_id": "u-1", "request_id": str(request_id)}, event_id, NOW)
    verified = user_event_of("OtpChallengeVerified", "otp-user:u-2", OtpChallengeVerified(uuid4(), NOW),
                             event_id=event_id)
    assert verified is not None and verified.event_type == "otp.verified" and verified.data["user_id"] == "u-2"
    assert verified.tenant == "default"


def test_an_email_outcome_maps_only_when_it_is_final() -> None:
    message_id, request_id, token = uuid4(), uuid4(), uuid4()
    retry = SendAttemptFailed(message_id, token, 1, NOW, "busy", True, NOW + timedelta(seconds=2))
    given_up = SendAttemptFailed(message_id, token, 1, NOW, "550", False, None)
    before_abandoning = SendAttemptFailed(message_id, token, 5, NOW, "busy", True, None)
    accepted = ProviderAccepted(message_id, token, 1, NOW, "p", "p-1", None)
    kwargs = {"scoped_user_id": "acme u-1", "message_id": message_id, "request_id": request_id,
              "event_id": uuid4()}
    assert email_event_of("SendAttemptFailed", retry, **kwargs) is None
    assert email_event_of("SendAttemptFailed", before_abandoning, **kwargs) is None  # email.abandoned tells it
    failed = email_event_of("SendAttemptFailed", given_up, **kwargs)
    assert failed is not None and failed.event_type == "email.failed"
    ok = email_event_of("ProviderAccepted", accepted, **kwargs)
    assert ok is not None and ok.data == {"tenant": "acme", "user_id": "u-1", "message_id": str(message_id),
                                          "request_id": str(request_id)}


def test_every_fact_a_webhook_is_made_of_is_an_event_the_log_knows_by_that_tag() -> None:
    from domain.webhooks import EMAIL_EVENT_TYPES, USER_EVENT_TYPES
    from infra.eventlog.tags import EVENT_TYPES as TAGS

    assert set(USER_EVENT_TYPES) | set(EMAIL_EVENT_TYPES) <= set(TAGS), "a webhook joins its fact by tag name"
    told = {event_type for event_type, _ in USER_EVENT_TYPES.values()} | set(EMAIL_EVENT_TYPES.values())
    assert told == set(EVENT_TYPES), "every webhook type is made of some fact, and no fact of an unlisted type"


def test_one_fact_is_one_delivery_per_listening_endpoint_all_with_the_facts_webhook_id() -> None:
    events = decide_add(fold_endpoints([]), endpoint_id=EP, tenant="t", url="https://a.test", event_types=(),
                        secret=SEALED, now=NOW)
    other = "ep_" + "b" * 32
    events += decide_add(fold_endpoints(events), endpoint_id=other, tenant="t", url="https://b.test",
                         event_types=("user.erased",), secret=SEALED, now=NOW)
    fact = WebhookEvent("otp.verified", "t", {"tenant": "t"}, uuid4(), NOW)
    [queued] = deliveries(fact, fold_endpoints(events).by_id.values(), now=NOW)
    assert queued.endpoint_id == EP and queued.webhook_id == f"msg_{fact.source_event_id.hex}"
    assert deliveries(fact, fold_endpoints(events).by_id.values(), now=NOW) == [queued]  # the same ids again
    assert body_of(queued) == b'{"type":"otp.verified","timestamp":"2026-12-05T12:00:00Z","data":{"tenant":"t"}}'


def test_a_tenant_has_at_most_ten_endpoints_removed_ones_not_counted() -> None:
    events: list[object] = []
    for n in range(MAX_ENDPOINTS):
        events += decide_add(fold_endpoints(events), endpoint_id=f"ep_{n:032x}", tenant="t", url="https://a.test",
                             event_types=(), secret=SEALED, now=NOW)
    with pytest.raises(InvalidInput, match="at most 10"):
        decide_add(fold_endpoints(events), endpoint_id="ep_" + "f" * 32, tenant="t", url="https://a.test",
                   event_types=(), secret=SEALED, now=NOW)
    events += decide_remove(fold_endpoints(events), f"ep_{0:032x}", now=NOW)
    assert decide_add(fold_endpoints(events), endpoint_id="ep_" + "f" * 32, tenant="t", url="https://a.test",
                      event_types=(), secret=SEALED, now=NOW)
