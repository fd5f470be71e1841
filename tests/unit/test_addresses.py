"""The one address rule, in the domain: a single plain ASCII addr-spec or a clear refusal."""

from __future__ import annotations

import pytest

from domain.addresses import RULE, check_address
from domain.errors import InvalidInput
from domain.otp import RequestOtp
from domain.reset import RequestReset
from tests.support.addresses import (
    ACCEPTED,
    HOSTILE,
    LEGACY_ADDRESSES,
    assert_mentions_no_address,
    old_rule,
)


@pytest.mark.parametrize("address", HOSTILE)
def test_a_hostile_address_is_refused_with_the_rule_named_and_the_address_not_quoted(address: str) -> None:
    with pytest.raises(InvalidInput) as refusal:
        check_address(address)

    assert refusal.value.message.startswith(f"recipient must be {RULE}: ")
    assert_mentions_no_address(refusal.value.message, address)


@pytest.mark.parametrize("address", HOSTILE)
def test_reset_and_otp_commands_refuse_a_hostile_address(address: str) -> None:
    with pytest.raises(InvalidInput, match="recipient must be a single plain email address"):
        RequestReset("42", address)
    with pytest.raises(InvalidInput, match="recipient must be a single plain email address"):
        RequestOtp("42", address)


@pytest.mark.parametrize("address", ACCEPTED)
def test_an_accepted_address_comes_back_unchanged(address: str) -> None:
    assert check_address(address) == address
    assert RequestReset("42", address).recipient == address
    assert RequestOtp("42", address).recipient == address


@pytest.mark.parametrize("value", [None, 42, b"ada@example.com", ["ada@example.com"]])
def test_a_value_that_is_not_a_string_is_refused(value: object) -> None:
    with pytest.raises(InvalidInput, match="must be a non-empty string"):
        check_address(value)


def test_the_entry_point_names_its_own_field() -> None:
    with pytest.raises(InvalidInput, match="^email must be a single plain email address"):
        check_address("a..b@example.com", "email")


def test_the_refusal_says_internationalised_addresses_are_not_supported() -> None:
    with pytest.raises(InvalidInput, match=r"ASCII \(internationalised addresses, SMTPUTF8, are not supported\)"):
        check_address("ada@b\u00fccher.example")


def test_the_legacy_corpus_is_what_the_old_rule_let_through() -> None:
    for address in LEGACY_ADDRESSES.values():
        old_rule(address)
        with pytest.raises(InvalidInput):
            check_address(address)
