"""No email address, @ look-alike or bidi control gets into the log in clear, however it is disguised.

A new user id names streams for ever, and reasons are stored in clear:
neither can be erased. The rules read text as a person or a browser would
(NFKC, percent-decoding, HTML references) before judging it.
"""

from __future__ import annotations

import pytest

from domain.characters import readable_form
from domain.errors import InvalidInput
from domain.input_checks import check_user_id, free_text_problem, operator_reason, user_id_problem
from domain.privacy import erasure_reason

REFUSED_USER_IDS = {
    "a plain address": "ada@example.com",
    "a fullwidth @": "ada＠example.com",
    "a small @": "ada﹫example.com",
    "a percent-encoded @": "ada%40example.com",
    "a lowercase percent-encoded fullwidth @": "ada%ef%bc%a0example.com",
    "a twice-encoded @": "ada%2540example.com",
    "a thrice-encoded @": "ada%252540example.com",
    "an HTML reference": "ada&#64;example.com",
    "a named HTML reference": "ada&commat;example.com",
    "a fullwidth percent sign": "ada％40example.com",
    "an address inside a longer id": "user-42-ada@example.com-legacy",
    "a dotless domain": "ada@localhost",
    "a lone @": "@ada",
    "a percent-encoded bidi override": "ada%E2%80%AEmoc.elpmaxe",
    "an encoding too deep to read": "ada%2525252540example.com",
}
ACCEPTED_USER_IDS = ["42", "u-1f3a9c", "auth0|5f7c8ec7c33c6c004bbafe82", "acme:user:42", "100%", "a&b",
                     "550e8400-e29b-41d4-a716-446655440000", "%41"]


@pytest.mark.parametrize("user_id", REFUSED_USER_IDS.values(), ids=REFUSED_USER_IDS.keys())
def test_a_user_id_holding_an_at_in_any_form_is_refused_without_being_repeated(user_id: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_user_id(user_id)

    assert user_id not in refused.value.message
    assert "example.com" not in refused.value.message


@pytest.mark.parametrize("user_id", ACCEPTED_USER_IDS)
def test_harmless_user_ids_are_accepted_as_they_were_sent(user_id: str) -> None:
    assert user_id_problem(user_id) is None
    assert check_user_id(user_id) == user_id


def test_a_new_user_id_is_printable_ascii_as_the_api_takes_it() -> None:
    assert user_id_problem("ü-ñ") is None, "no @ in any form: harmless as text"
    with pytest.raises(InvalidInput, match="user_id must be printable ASCII characters without spaces"):
        check_user_id("ü-ñ")  # the rule the HTTP API's schema states, for the command line too


def test_the_user_id_message_says_why_and_what_to_send_instead() -> None:
    problem = user_id_problem("ada%40example.com")

    assert problem is not None
    assert "erasure cannot reach it" in problem and "the application's own id" in problem


REFUSED_REASONS = {
    "a plain address": ("asked by ada@example.com", "holds an email address"),
    "a fullwidth @": ("asked by ada＠example.com", "@ look-alike"),
    "a lone fullwidth @": ("ping ＠support", "@ look-alike"),
    "a percent-encoded @": ("asked by ada%40example.com", "holds an email address"),
    "a twice-encoded @": ("asked by ada%2540example.com", "holds an email address"),
    "an HTML reference": ("asked by ada&#64;example.com", "holds an email address"),
    "a right-to-left override": ("ticket \u202e1234", "bidirectional control"),
    "an isolate": ("ticket \u20661234\u2069", "bidirectional control"),
    "a left-to-right mark": ("ticket\u200e 1234", "bidirectional control"),
    "an Arabic letter mark": ("ticket\u061c 1234", "bidirectional control"),
    "an encoded override": ("ticket %E2%80%AE1234", "bidirectional control"),
    "a line break": ("ticket\n1234", "control characters"),
    "a C1 control": ("ticket\x851234", "control characters"),
    "a line separator": ("ticket\u20281234", "control characters"),
}


@pytest.mark.parametrize(("reason", "said"), REFUSED_REASONS.values(), ids=REFUSED_REASONS.keys())
def test_a_reason_holding_an_address_a_look_alike_or_a_control_is_refused(reason: str, said: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        erasure_reason(reason)

    assert said in refused.value.message
    assert "example.com" not in refused.value.message


@pytest.mark.parametrize("reason", ["GDPR request 2024-117", "ticket #12, asked by phone", "100% sure: see @support",
                                    "Löschung auf Wunsch (Art. 17 DSGVO)", "طلب حذف 42", "a&b", "50%25 done"])
def test_ordinary_reasons_are_accepted(reason: str) -> None:
    assert free_text_problem(reason, what="the reason") is None
    assert erasure_reason(f"  {reason} ") == reason


def test_an_address_in_a_reason_is_answered_with_what_to_write_instead() -> None:
    with pytest.raises(InvalidInput) as refused:
        operator_reason("ada%40example.com", blank="say why", instead="name the ticket instead")

    assert refused.value.message == "the reason holds an email address; name the ticket instead"


@pytest.mark.parametrize(("sent", "read"), [
    ("ada%40example.com", "ada@example.com"),
    ("ada＠example.com", "ada@example.com"),
    ("ada%252540x", "ada@x"),
    ("ada&#x40;x", "ada@x"),
    ("plain", "plain"),
])
def test_text_is_judged_as_it_would_be_read(sent: str, read: str) -> None:
    assert readable_form(sent) == read


def test_text_still_changing_after_the_bounded_rounds_is_not_read_further() -> None:
    assert readable_form("%25252525252540") is None
