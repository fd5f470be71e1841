"""Language tags: read as BCP 47 writes them, matched as RFC 4647 looks them up, English at the end."""

from __future__ import annotations

import pytest

from domain.errors import InvalidInput
from domain.locales import best_locale, fallback_chain, parse_locale, prefixes

SHIPPED = ["en", "de"]


@pytest.mark.parametrize(("given", "stored"), [
    ("de", "de"), ("DE", "de"), ("de-at", "de-AT"), ("zh-hant-tw", "zh-Hant-TW"), ("es-419", "es-419"),
    ("sr-Latn-RS", "sr-Latn-RS"), ("de-CH-1996", "de-CH-1996"), ("en-US-x-TWAIN", "en-US-x-twain"),
    ("en-a-bbb-x-a-ccc", "en-a-bbb-x-a-ccc"), ("ast", "ast"),
])
def test_a_language_tag_is_kept_in_its_conventional_case(given: str, stored: str) -> None:
    assert parse_locale(given) == stored


@pytest.mark.parametrize("garbage", [
    "", "d", "deutschland", "de_AT", "de-", "-de", "de--AT", "de AT", "de-AT\n", "x-private", "1de", "de-ÄT",
    "en-US-x", "de-a", "de-" + "a" * 9, "de-" + "-".join(["Latn"] * 20), "<script>", 7, None,
])
def test_anything_but_a_language_tag_is_invalid_input_in_words_that_do_not_repeat_it(garbage: object) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_locale(garbage)

    assert refused.value.message == "locale must be a BCP 47 language tag such as en, de or de-AT"


def test_a_tag_is_looked_up_by_its_ever_shorter_prefixes_never_ending_in_a_singleton() -> None:
    assert prefixes("zh-Hant-TW") == ["zh-Hant-TW", "zh-Hant", "zh"]
    assert prefixes("en-a-bbb") == ["en-a-bbb", "en"]


def test_the_chain_is_the_request_then_the_tenant_default_then_english_without_repeats() -> None:
    assert fallback_chain("de-AT", "fr-CA") == ["de-AT", "de", "fr-CA", "fr", "en"]
    assert fallback_chain(None, None) == ["en"]
    assert fallback_chain("en-GB", "en") == ["en-GB", "en"]


def test_an_exact_match_wins() -> None:
    assert best_locale("de-AT", None, ["en", "de", "de-AT"]) == "de-AT"


def test_a_regional_tag_is_served_by_its_language() -> None:
    assert best_locale("de-AT", None, SHIPPED) == "de"


def test_a_language_nobody_translated_falls_back_to_the_tenant_default_then_english() -> None:
    assert best_locale("fr", "de", SHIPPED) == "de"
    assert best_locale("fr", None, SHIPPED) == "en"
    assert best_locale("fr", "it", SHIPPED) == "en"


def test_no_language_asked_for_is_the_tenant_default() -> None:
    assert best_locale(None, "de-CH", SHIPPED) == "de"
    assert best_locale(None, None, SHIPPED) == "en"


def test_the_answer_is_spelt_as_the_templates_spell_it() -> None:
    assert best_locale("pt-BR", None, ["en", "pt-br"]) == "pt-br"
