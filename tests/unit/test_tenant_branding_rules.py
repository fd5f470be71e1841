"""A tenant's settings, pure: each value held to the rule of the deployment-wide setting it stands in for.

One function judges a setting wherever it comes from (the CLI, the API, the
configuration), so a value the deployment's setting refuses is refused for a
tenant in the same words, and the other way round.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from domain.errors import InvalidInput
from domain.policy import OtpPolicy, ResetPolicy, with_overrides
from domain.templates import EMAILS, Brand, EmailTemplate, reset_link, template_problem
from domain.tenants import (
    TemplateOverride,
    TenantConfigured,
    TenantCreated,
    TenantSettings,
    check_setting,
    decide_configure_tenant,
    fold_tenant,
)
from infra.config import values
from infra.eventlog.codec import default_codec
from infra.config.settings import load_settings
from projections.tenants import evolve_tenant_settings, settings_history

T0 = datetime(2030, 1, 1, tzinfo=UTC)
CREATED = TenantCreated("acme", T0)


def configure(given: list[object], **changes: object) -> list[TenantConfigured]:
    return decide_configure_tenant(fold_tenant("acme")(given), "acme", changes=changes, actor="cli:ops",
                                   reason="OPS-1", now=T0)


UNSAFE = {
    "http-to-a-public-host": ("reset_url", "http://books.acme.example/reset", "must use https://"),
    "no-host": ("reset_url", "https:///reset", "must be a URL with a host"),
    "display-name-trick": ("sender", '"bank@x.com" <evil@y.com>', "single plain email address"),
    "two-senders": ("sender", "a@x.example,b@y.example", "single plain email address"),
    "name-holding-an-address": ("sender_name", "bank@x.com", "must not hold an address"),
    "name-with-quotes": ("sender_name", '"Bank"', "must not hold an address"),
    "name-with-fullwidth-at": ("sender_name", "bank＠x.com", "must not hold an address"),
    "name-with-a-line-break": ("sender_name", "Bank\nBcc: x@y.z", "one line"),
    "encoded-word": ("sender_name", "=?utf-8?q?bank?=", "encoded-word"),
    "reply-to-list": ("reply_to", "a@x.example, b@y.example", "single plain email address"),
    "product-with-url": ("product_name", "see https://evil.example", "must not hold an address or a URL"),
    "support-in-clear": ("support_contact", "http://help.example", "must use https://"),
    "locale-not-shipped": ("default_locale", "fr", "shipped locales en, de"),
    "code-below-the-floor": ("otp_digits", 5, "between 6 and 10 (NIST SP 800-63B: at least 6 digits)"),
    "link-over-a-day": ("reset_ttl", 86401, "between 1 and 86400"),
    "unknown-placeholder": ("templates", (TemplateOverride("en", "reset_link.txt", "$link $secret"),),
                            "uses $secret"),
    "body-without-its-link": ("templates", (TemplateOverride("de", "reset_link.html", "Hallo"),), "lacks $link"),
    "misnamed-file": ("templates", (TemplateOverride("en", "reset.txt", "$link"),), "not one authledger sends"),
}


@pytest.mark.parametrize(("field", "value", "said"), UNSAFE.values(), ids=UNSAFE.keys())
def test_an_unsafe_value_is_refused_and_nothing_is_decided(field: str, value: object, said: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        configure([CREATED], **{field: value})
    assert said in refused.value.message


@pytest.mark.parametrize(("variable", "value"), [
    ("AUTHLEDGER_RESET_URL", "http://books.acme.example/reset"),
    ("AUTHLEDGER_SENDER", '"bank@x.com" <evil@y.com>'),
    ("AUTHLEDGER_OTP_DIGITS", "5"),
    ("AUTHLEDGER_PRODUCT_NAME", "see https://evil.example"),
])
def test_the_deployments_setting_refuses_what_a_tenants_does(variable: str, value: str) -> None:
    with pytest.raises(Exception, match=variable):
        load_settings({variable: value})


def test_the_deployments_sender_may_carry_a_display_name_a_tenant_gives_apart() -> None:
    assert values.sender("Acme Books <no-reply@acme.example>") == "Acme Books <no-reply@acme.example>"
    assert check_setting("sender", "no-reply@acme.example") == "no-reply@acme.example"
    assert check_setting("sender_name", " Acme Books ") == "Acme Books"
    with pytest.raises(InvalidInput, match="single plain email address"):
        check_setting("sender", "Acme Books <no-reply@acme.example>")


def test_loopback_reset_pages_and_https_support_pages_are_accepted() -> None:
    assert check_setting("reset_url", "http://127.0.0.1:8000/reset") == "http://127.0.0.1:8000/reset"
    assert check_setting("support_contact", "https://acme.example/help") == "https://acme.example/help"
    assert check_setting("support_contact", "help@acme.example") == "help@acme.example"
    assert check_setting("default_locale", "DE") == "de"


def test_the_fold_sets_clears_and_counts_versions_and_the_history_names_each_change() -> None:
    [first] = configure([CREATED], sender="no-reply@acme.example", otp_digits=8, product_name="Acme Books")
    [second] = configure([CREATED, first], otp_digits=None, reply_to="help@acme.example")

    settings = fold_tenant("acme")([CREATED, first, second]).settings
    assert (settings.version, settings.sender, settings.otp_digits, settings.reply_to) == (
        2, "no-reply@acme.example", None, "help@acme.example")
    assert second.cleared == ("otp_digits",) and set(second.changed) == {"reply_to", "otp_digits"}
    assert settings.policy_overrides() == {}
    assert [change.changes for change in settings_history([first, second])][1] == {
        "reply_to": {"from": None, "to": "help@acme.example"}, "otp_digits": {"from": 8, "to": None}}
    row = evolve_tenant_settings(evolve_tenant_settings(None, first), second)
    assert row is not None and row.settings == settings and row.takeover_changes == 2


def test_the_same_settings_again_decide_nothing_and_an_unknown_setting_is_refused() -> None:
    [first] = configure([CREATED], product_name="Acme Books")
    assert configure([CREATED, first], product_name="Acme Books") == []
    with pytest.raises(InvalidInput, match="'colour' is not a tenant setting"):
        configure([CREATED], colour="red")


def test_policy_overrides_replace_the_deployments_fields_and_nothing_else() -> None:
    overrides = TenantSettings(reset_ttl=600, otp_digits=8, otp_ttl=120).policy_overrides()
    reset = with_overrides(ResetPolicy(cooldown=timedelta(seconds=30)), "reset", overrides)
    otp = with_overrides(OtpPolicy(), "otp", overrides)
    assert (reset.ttl, reset.cooldown) == (timedelta(minutes=10), timedelta(seconds=30))
    assert (otp.digits, otp.ttl, otp.max_attempts) == (8, timedelta(minutes=2), 5)


def test_every_email_may_name_the_product_and_the_support_contact() -> None:
    for email in EMAILS:
        assert template_problem(f"{email}.subject", "$product_name: $support_contact") is None
    template = EmailTemplate("Reset your $product_name password", "$link\nHelp: $support_contact", "<p>$link</p>")
    rendered = reset_link(template, "https://x.example/r?token=t", expires_at=T0,
                          brand=Brand("Acme <Books>", "help@acme.example"))
    assert rendered.subject == "Reset your Acme <Books> password"
    assert rendered.text.endswith("Help: help@acme.example")


def test_a_configuration_recorded_before_branding_reads_as_setting_only_its_purposes() -> None:
    payload = {"name": "acme", "configured_at": T0.isoformat(), "actor": "cli:ops", "reason": "OPS-7",
               "purposes": [{"name": "login", "text": "sign-in code"}]}
    event = default_codec().decode("TenantConfigured", 1, payload)
    assert isinstance(event, TenantConfigured)
    assert event.changed == ("purposes",) and event.cleared == () and event.sender is None
    assert default_codec().encode(event)[1] == 2
