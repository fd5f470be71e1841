"""The emails in the reader's language: English and German shipped whole, a missing translation falls back."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from domain import templates
from domain.errors import ConfigError
from domain.templates import EMAILS, PARTS, TemplateSets
from infra.emails.templates import check_overrides, default_templates, load_templates

EXPIRES = datetime(2030, 5, 1, 10, 30, tzinfo=UTC)
FILES = sorted(f"{email}.{part}" for email in EMAILS for part in PARTS)


def rendered_reset(locale: str | None, sets: TemplateSets | None = None, tenant_default: str | None = None,
                   ) -> tuple[str, templates.Rendered]:
    chosen, template = templates.localized(sets or default_templates(), "reset_link", requested_locale=locale,
                                           tenant_default_locale=tenant_default)
    return chosen, templates.reset_link(template, "https://app.test/reset?token=t", expires_at=EXPIRES)


@pytest.mark.parametrize("locale", ["en", "de"])
def test_english_and_german_are_shipped_whole(locale: str) -> None:
    assert sorted(default_templates().by_locale[locale]) == FILES


@pytest.mark.parametrize("name", FILES)
def test_every_german_text_is_a_translation_not_a_copy(name: str) -> None:
    shipped = default_templates().by_locale
    assert shipped["de"][name] != shipped["en"][name]


def test_every_email_reads_in_german() -> None:
    sets = default_templates()
    reset = templates.reset_link(templates.localized(sets, "reset_link", requested_locale="de")[1],
                                 "https://app.test/reset?token=t", expires_at=EXPIRES)
    changed = templates.password_changed(templates.localized(sets, "password_changed", requested_locale="de")[1],
                                         changed_at=EXPIRES)
    code = templates.otp_code(templates.localized(sets, "otp_code", requested_locale="de")[1], "042917",
                              expires_at=EXPIRES, code_name="sign-in code")

    assert reset.subject == "Passwort zurücksetzen" and "Passwort Ihres Kontos zurückzusetzen" in reset.text
    assert changed.subject == "Ihr Passwort wurde geändert" and "am 2030-05-01 10:30 UTC geändert" in changed.text
    # The purpose's display text stays the tenant's own words.
    assert code.subject == "Ihr Code: sign-in code" and "Hier ist Ihr Code (sign-in code):\n\n042917\n" in code.text
    assert all('<html lang="de">' in email.html for email in (reset, changed, code))


@pytest.mark.parametrize(("asked", "tenant_default", "chosen"), [
    ("de", None, "de"), ("de-AT", None, "de"), ("fr", None, "en"), ("fr", "de", "de"), (None, "de-CH", "de"),
    (None, None, "en"), ("en-GB", "de", "en"),
])
def test_the_email_is_in_the_best_match_of_request_tenant_default_and_english(
    asked: str | None, tenant_default: str | None, chosen: str
) -> None:
    assert rendered_reset(asked, tenant_default=tenant_default)[0] == chosen


def test_a_language_folder_missing_a_file_falls_back_to_it_rather_than_failing(tmp_path: Path) -> None:
    (tmp_path / "fr").mkdir()
    (tmp_path / "fr" / "reset_link.subject").write_text("Réinitialisez votre mot de passe\n")

    chosen, email = rendered_reset("fr-CA", load_templates(tmp_path))

    assert chosen == "fr"
    assert email.subject == "Réinitialisez votre mot de passe"
    assert "open this link before 2030-05-01 10:30 UTC" in email.text, "the body the folder lacks is English"


def test_a_missing_file_falls_back_through_the_tenant_default_before_english(tmp_path: Path) -> None:
    (tmp_path / "fr").mkdir()
    (tmp_path / "fr" / "reset_link.subject").write_text("Réinitialisez votre mot de passe\n")

    chosen, email = rendered_reset("fr", load_templates(tmp_path), tenant_default="de")

    assert chosen == "fr" and email.subject == "Réinitialisez votre mot de passe"
    assert "öffnen Sie vor 2030-05-01 10:30 UTC diesen Link" in email.text


def test_a_language_with_no_file_for_an_email_is_not_chosen_for_it(tmp_path: Path) -> None:
    (tmp_path / "fr").mkdir()
    (tmp_path / "fr" / "otp_code.subject").write_text("Votre $code_name\n")

    assert rendered_reset("fr", load_templates(tmp_path))[0] == "en"


def test_a_folder_replaces_a_shipped_translation_file_by_file(tmp_path: Path) -> None:
    (tmp_path / "de").mkdir()
    (tmp_path / "de" / "reset_link.subject").write_text("Neues Passwort für Example Shop\n")
    (tmp_path / "reset_link.subject").write_text("New password for Example Shop\n")
    loaded = load_templates(tmp_path)

    german = rendered_reset("de", loaded)[1]
    assert german.subject == "Neues Passwort für Example Shop"
    assert german.text == rendered_reset("de")[1].text, "the German body the folder lacks is the shipped one"
    assert rendered_reset("en", loaded)[1].subject == "New password for Example Shop"


def test_overrides_given_as_data_go_over_the_folder_and_the_package(tmp_path: Path) -> None:
    (tmp_path / "de").mkdir()
    (tmp_path / "de" / "reset_link.subject").write_text("Aus dem Ordner\n")
    overrides = {"de-at": {"reset_link.subject": "Passwort zurücksetzen, Servus\n"}}

    loaded = load_templates(tmp_path, overrides)

    assert rendered_reset("de-AT", loaded)[0] == "de-AT"
    assert rendered_reset("de-AT", loaded)[1].subject == "Passwort zurücksetzen, Servus"
    assert rendered_reset("de-AT", loaded)[1].text == rendered_reset("de")[1].text
    assert rendered_reset("de", loaded)[1].subject == "Aus dem Ordner"


def test_overrides_may_also_be_laid_over_at_render_time() -> None:
    chosen, template = templates.localized(
        default_templates(), "reset_link", requested_locale="de", tenant_default_locale=None,
        template_overrides={"de": {"reset_link.subject": "Ihr Link für Example Shop\n"}})

    assert (chosen, template.subject) == ("de", "Ihr Link für Example Shop\n")
    assert template.txt == default_templates().by_locale["de"]["reset_link.txt"]


@pytest.mark.parametrize(("overrides", "says"), [
    ({"deutsch_AT": {"reset_link.subject": "x\n"}}, "template override locale 'deutsch_AT' is not named by a "
                                                    "language tag such as de or de-AT"),
    ({"de": {"reset-link.txt": "$link\n"}}, "template override de/reset-link.txt is not one authledger sends"),
    ({"de": {"reset_link.html": "<a href=$url>x</a>"}}, "template override de/reset_link.html uses $url"),
    ({"de": {"otp_code.txt": "Kein Code\n"}}, "template override de/otp_code.txt lacks $code"),
])
def test_bad_overrides_given_as_data_are_refused_naming_the_file(overrides: dict[str, dict[str, str]],
                                                                  says: str) -> None:
    with pytest.raises(ConfigError) as refused:
        check_overrides(overrides)

    assert refused.value.message.startswith(says)


@pytest.mark.parametrize(("folder", "name", "content", "says"), [
    ("de_AT", "reset_link.subject", "x\n", "is not named by a language tag"),
    ("de", "otp_code.txt", "Ihr Code ist unterwegs.\n", "lacks $code"),
    ("de", "reset-link.txt", "$link\n", "is not one authledger sends"),
])
def test_a_bad_language_folder_is_refused_in_one_line_naming_it(
    tmp_path: Path, folder: str, name: str, content: str, says: str
) -> None:
    (tmp_path / folder).mkdir()
    (tmp_path / folder / name).write_text(content)

    with pytest.raises(ConfigError) as refused:
        load_templates(tmp_path)

    assert says in refused.value.message and folder in refused.value.message
    assert "\n" not in refused.value.message
