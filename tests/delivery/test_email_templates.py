"""The emails' words: natural subjects, English and German, templates an operator can replace, checked at start."""

from __future__ import annotations

import mailbox
from datetime import UTC, datetime
from pathlib import Path

import pytest

from domain import templates
from domain.errors import ConfigError
from domain.templates import EmailTemplate, TemplateSets
from infra.emails.templates import default_templates, load_templates
from tests.support.cli import Env, run_cli

EXPIRES = datetime(2030, 5, 1, 10, 30, tzinfo=UTC)


def english(email: str, sets: TemplateSets | None = None) -> EmailTemplate:
    return templates.localized(sets or default_templates(), email, requested_locale=None)[1]


@pytest.mark.parametrize(("code_name", "subject"), [
    ("sign-in code", "Your sign-in code"),
    ("email verification code", "Your email verification code"),
    ("two-step verification code", "Your two-step verification code"),
])
def test_the_code_email_names_the_code_by_its_display_text(code_name: str, subject: str) -> None:
    rendered = templates.otp_code(english("otp_code"), "042917", expires_at=EXPIRES, code_name=code_name)

    assert rendered.subject == subject
    assert f"Here is your {code_name}:" in rendered.text
    assert "\n042917\n" in rendered.text and "042917" in rendered.html
    assert "2030-05-01 10:30 UTC" in rendered.text


def test_a_display_text_is_escaped_in_html() -> None:
    rendered = templates.otp_code(english("otp_code"), "042917", expires_at=EXPIRES,
                                  code_name="<b>code</b> & more")

    assert "&lt;b&gt;code&lt;/b&gt; &amp; more" in rendered.html and "<b>" not in rendered.html


def test_the_reset_link_is_escaped_in_html_and_verbatim_in_text() -> None:
    link = "https://app.test/reset?token=a&b"
    rendered = templates.reset_link(english("reset_link"), link, expires_at=EXPIRES)

    assert rendered.subject == "Reset your password"
    assert f"\n{link}\n" in rendered.text
    assert 'href="https://app.test/reset?token=a&amp;b"' in rendered.html


def test_a_folder_replaces_the_templates_it_holds_and_keeps_the_others(tmp_path: Path) -> None:
    (tmp_path / "otp_code.subject").write_text("$code_name for Example Shop\n")
    (tmp_path / "otp_code.txt").write_text("Code: $code ($purpose), until $expires_at. Costs $$0.\n")

    loaded = load_templates(tmp_path)
    rendered = templates.otp_code(english("otp_code", loaded), "123456", expires_at=EXPIRES, code_name="sign-in code")

    assert rendered.subject == "sign-in code for Example Shop"
    # $purpose, from before purposes were declared, is the display text too: never what a caller sent.
    assert rendered.text == "Code: 123456 (sign-in code), until 2030-05-01 10:30 UTC. Costs $0.\n"
    assert english("otp_code", loaded).html == english("otp_code").html
    assert english("reset_link", loaded) == english("reset_link")


@pytest.mark.parametrize(("name", "content", "says"), [
    ("otp_code.txt", "Your code is on its way.\n", "lacks $code"),
    ("reset_link.html", "<p>Open $url</p>", "uses $url"),
    ("reset_link.subject", "Reset\nyour password\n", "must be one line"),
    ("password_changed.txt", "It cost $5.\n", "malformed placeholder"),
    ("reset-link.txt", "$link\n", "is not one authledger sends"),
])
def test_a_template_folder_with_a_bad_file_is_refused_in_one_line_naming_it(
    tmp_path: Path, name: str, content: str, says: str
) -> None:
    (tmp_path / name).write_text(content)

    with pytest.raises(ConfigError) as refused:
        load_templates(tmp_path)

    assert says in refused.value.message and name in refused.value.message
    assert "\n" not in refused.value.message


def test_start_up_refuses_a_template_folder_that_leaves_out_the_code(tmp_path: Path, env: Env) -> None:
    folder = tmp_path / "templates"
    folder.mkdir()
    (folder / "otp_code.txt").write_text("Your code is on its way.\n")
    env = {**env, "AUTHLEDGER_TEMPLATES_DIR": str(folder)}

    result = run_cli(env, "worker", "--once")

    assert result.exit_code == 78
    assert result.output.strip().splitlines() == [f"Error: email template {folder / 'otp_code.txt'} lacks $code, "
                                                  "which the email exists to carry"]


def test_a_delivered_email_uses_the_operator_template_and_says_it_was_auto_generated(
    tmp_path: Path, env: Env
) -> None:
    folder = tmp_path / "templates"
    folder.mkdir()
    (folder / "otp_code.subject").write_text("Example Shop: your $code_name\n")
    env = {**env, "AUTHLEDGER_TEMPLATES_DIR": str(folder), "AUTHLEDGER_MAILDIR": str(tmp_path / "maildir")}

    requested = run_cli(env, "otp", "request", "--user-id", "7", "--email", "ada@example.test")
    delivered = run_cli(env, "worker", "--once")

    assert requested.exit_code == 0 and delivered.exit_code == 0, requested.output + delivered.output
    [message] = mailbox.Maildir(tmp_path / "maildir", create=False)
    assert message["Subject"] == "Example Shop: your sign-in code"
    assert message["Auto-Submitted"] == "auto-generated"
