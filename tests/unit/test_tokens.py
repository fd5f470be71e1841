"""Tokens and codes are derived, stable across releases, and compared safely."""

from __future__ import annotations

import base64
import hashlib
import hmac
from uuid import UUID

import pytest

from domain.errors import ConfigError
from domain.tokens import (
    SecretUnavailable,
    TokenKeys,
    derivation_nonce,
    derive_otp_code,
    derive_reset_token,
    hash_token,
    nonce_readable,
    nonce_text,
    otp_code_matches,
)

KEY = b"test-key-1"
REQUEST = UUID("12345678-1234-5678-1234-567812345678")


def test_a_reset_token_is_the_known_unpadded_base64url_hmac() -> None:
    # A known answer: links already in inboxes must still work after any
    # refactoring, so the derivation may never change silently.
    assert derive_reset_token(KEY, REQUEST) == "cn2LW9w6bFgd_d0w-XTSYJl1HKt_eLCM4G76WLF80Qk"


def test_a_reset_token_depends_on_both_the_key_and_the_request() -> None:
    token = derive_reset_token(KEY, REQUEST)
    assert derive_reset_token(KEY, REQUEST) == token
    assert derive_reset_token(b"another-key", REQUEST) != token
    assert derive_reset_token(KEY, UUID(int=1)) != token


def test_a_reset_token_is_url_safe_without_padding() -> None:
    for n in range(50):
        token = derive_reset_token(KEY, UUID(int=n))
        assert len(token) == 43
        assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_a_token_hash_is_hex_sha256() -> None:
    assert hash_token("abc") == hashlib.sha256(b"abc").hexdigest()
    assert hash_token("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_an_otp_code_is_the_known_hmac_modulo_a_power_of_ten() -> None:
    assert derive_otp_code(KEY, REQUEST, 6) == "703714"
    assert derive_otp_code(KEY, REQUEST, 10) == "5772703714"


def test_an_otp_code_is_zero_padded_to_its_length() -> None:
    assert derive_otp_code(KEY, UUID(int=2), 6) == "095662"


def test_derivation_still_takes_the_four_and_five_digits_of_challenges_issued_before_the_floor() -> None:
    # New configuration starts at 6 digits (domain.policy); older challenges keep theirs.
    assert [derive_otp_code(KEY, REQUEST, d) for d in (4, 5)] == ["3714", "03714"]
    assert otp_code_matches(KEY, REQUEST, 4, "3714")


def test_an_otp_code_length_outside_four_to_ten_digits_is_a_config_error() -> None:
    for digits in (3, 11, 0):
        with pytest.raises(ConfigError, match="between 4 and 10"):
            derive_otp_code(KEY, REQUEST, digits)


def test_the_right_otp_code_matches() -> None:
    assert otp_code_matches(KEY, REQUEST, 6, "703714")


@pytest.mark.parametrize("candidate", ["703715", "70371", "7037140", "", "७०३७१४", "703714 "])
def test_any_other_candidate_does_not_match(candidate: str) -> None:
    assert not otp_code_matches(KEY, REQUEST, 6, candidate)


def test_a_code_from_another_challenge_does_not_match() -> None:
    assert not otp_code_matches(KEY, UUID(int=1), 6, derive_otp_code(KEY, REQUEST, 6))


def test_token_keys_look_keys_up_by_id() -> None:
    keys = TokenKeys("k2", {"k2": b"new", "k1": b"old"})
    assert keys.key("k1") == b"old"
    assert keys.current == b"new"
    assert list(keys.keys) == ["k2", "k1"]


def test_an_unconfigured_key_id_is_a_clear_config_error() -> None:
    keys = TokenKeys("k2", {"k2": b"new"})
    with pytest.raises(ConfigError, match="token key id 'k1' is not configured"):
        keys.key("k1")


def test_the_current_key_id_must_be_configured() -> None:
    with pytest.raises(ConfigError, match="'k3' is not configured"):
        TokenKeys("k3", {"k2": b"new"})


@pytest.mark.parametrize("keys", [{}, {"k1": b""}, {"": b"key"}, {"k1": "text, not bytes"}])
def test_empty_or_malformed_keys_are_refused(keys: dict) -> None:
    with pytest.raises(ConfigError):
        TokenKeys("k1", keys)


def test_token_keys_never_show_key_material_in_their_repr() -> None:
    keys = TokenKeys("k1", {"k1": b"super-secret-key"})
    assert "super-secret-key" not in repr(keys)


def test_token_keys_do_not_change_when_the_callers_dict_does() -> None:
    source = {"k1": b"key"}
    keys = TokenKeys("k1", source)
    source["k1"] = b"changed"
    assert keys.key("k1") == b"key"
    with pytest.raises(TypeError):
        keys.keys["k1"] = b"changed"  # type: ignore[index]


NONCE = nonce_text(bytes(range(32)))


def test_a_derivation_2_token_is_the_known_hmac_of_label_request_id_and_nonce() -> None:
    # Known answers, as for derivation 1: links in inboxes must keep working.
    assert NONCE == "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"
    assert derive_reset_token(KEY, REQUEST, NONCE) == "XThJwOOEZYIMKjzFNIxboqLFkCWTVb6jdaH2M2sVhd8"
    assert derive_otp_code(KEY, REQUEST, 6, NONCE) == "759438"
    expected = hmac.new(KEY, f"reset:{REQUEST}:{NONCE}".encode(), hashlib.sha256).digest()
    assert derive_reset_token(KEY, REQUEST, NONCE) == base64.urlsafe_b64encode(expected).rstrip(b"=").decode()


def test_a_derivation_2_token_differs_from_derivation_1_and_with_every_nonce() -> None:
    other = nonce_text(bytes(32))
    assert len({derive_reset_token(KEY, REQUEST), derive_reset_token(KEY, REQUEST, NONCE),
                derive_reset_token(KEY, REQUEST, other)}) == 3


@pytest.mark.parametrize("unreadable", ["[erased]", "", "A" * 42, "A" * 44, "enc:v1:k:abc", None])
def test_an_erased_or_unreadable_nonce_derives_nothing(unreadable: str | None) -> None:
    assert not nonce_readable(2, unreadable)
    with pytest.raises(SecretUnavailable):
        derivation_nonce(2, unreadable)
    if unreadable is not None:
        with pytest.raises(SecretUnavailable):
            derive_reset_token(KEY, REQUEST, unreadable)


def test_derivation_1_needs_no_nonce_and_an_unknown_derivation_derives_nothing() -> None:
    assert derivation_nonce(1, None) is None and derivation_nonce(2, NONCE) == NONCE
    assert not nonce_readable(3, NONCE)


def test_a_nonce_takes_exactly_32_random_bytes() -> None:
    with pytest.raises(ValueError, match="32 random bytes"):
        nonce_text(b"short")
