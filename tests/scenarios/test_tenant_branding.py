"""Two configured tenants on one real server: each tenant's email is its own, and unsafe changes write nothing.

acme and shop each set their reset page, sender, reply-to, product name and
an English subject through ``PATCH /v1/admin/tenant`` with their admin key.
Their users' emails then come from their own sender, link to their own page
and name their own product, in the user's language or else their tenant's;
``explain`` (the timeline) names the settings
version each was rendered with. A change that would send a tenant's links or
mail somewhere unsafe is refused with nothing written, whether it comes over
HTTP or from ``authledger tenants configure``, and ``tenants show --history``
reads as before.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from sqlalchemy import Engine

from infra.delivery.providers.mime import render_mime
from infra.logs import FIELDS
from infra.services.unit_of_work import ServiceContext
from tests.support.cli import Env, cli_outcome
from tests.support.replay import assert_projections_match_log
from tests.support.two_tenants import Tenant, TwoTenants, events_digest, two_tenants

pytestmark = pytest.mark.slow

SUBJECT = "Reset your $product_name password"
BODY = "Hello from $product_name.\n\n$link\n\nQuestions? $support_contact\n"
BRANDS = {
    "acme": {"reset_url": "https://books.acme.example/reset", "sender": "no-reply@acme.example",
             "sender_name": "Acme Books", "reply_to": "help@acme.example", "product_name": "Acme Books",
             "support_contact": "https://acme.example/help"},
    "shop": {"reset_url": "https://shop.example/account/reset", "sender": "accounts@shop.example",
             "sender_name": "Shop", "reply_to": "care@shop.example", "product_name": "Shop Online",
             "support_contact": "care@shop.example"},
}


def configure(world: TwoTenants, tenant: Tenant, body: dict[str, object]) -> dict[str, object]:
    response = world.call(tenant, "admin", "PATCH", "/v1/admin/tenant", {**body, "reason": "launch OPS-38"})
    assert response.status_code == 200, response.text
    return response.json()


def test_each_configured_tenants_email_has_its_own_sender_reset_url_and_product_name(
    ctx: ServiceContext, engine: Engine, env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    with two_tenants(ctx) as world, caplog.at_level(logging.WARNING, logger="authledger.tenants"):
        for tenant in (world.acme, world.shop):
            templates = [{"locale": "en", "file": "reset_link.subject", "text": SUBJECT},
                         {"locale": "en", "file": "reset_link.txt", "text": BODY}]
            configured = configure(world, tenant, {**BRANDS[tenant.name], "templates": templates})
            assert configured["version"] == 1 and configured["recorded"] is True

        acme_reset, _ = world.request_reset(world.acme, "42", "ada@acme.example")
        world.request_reset(world.shop, "42", "bob@shop.example")

        [acme_mail] = world.mailer.sent_to("ada@acme.example")
        [shop_mail] = world.mailer.sent_to("bob@shop.example")
        for mail, brand in ((acme_mail, BRANDS["acme"]), (shop_mail, BRANDS["shop"])):
            headers = render_mime(mail)
            assert headers["From"].addresses[0].display_name == brand["sender_name"]
            assert headers["From"].addresses[0].addr_spec == brand["sender"]
            assert str(headers["Reply-To"]) == brand["reply_to"]
            assert mail.subject == f"Reset your {brand['product_name']} password"
            [link] = [line for line in mail.text_body.splitlines() if "token=" in line]
            assert link.startswith(f"{brand['reset_url']}?token=")
            assert f"Hello from {brand['product_name']}." in mail.text_body
            assert f"Questions? {brand['support_contact']}" in mail.text_body
            assert headers["Content-Language"] == "en"

        # Languages: the request's, else the tenant's default, else English; German ships for every email.
        configure(world, world.shop, {"default_locale": "de"})
        world.request_reset(world.acme, "43", "cy@acme.example", locale="de")
        world.request_reset(world.shop, "43", "di@shop.example", locale="fr")  # nobody translated French
        world.request_reset(world.acme, "44", "ed@acme.example", locale="fr")
        [german] = world.mailer.sent_to("cy@acme.example")
        [shops_default] = world.mailer.sent_to("di@shop.example")
        [english] = world.mailer.sent_to("ed@acme.example")
        for mail in (german, shops_default):
            assert render_mime(mail)["Content-Language"] == "de" and mail.subject == "Passwort zurücksetzen"
        assert render_mime(shops_default)["From"].addresses[0].addr_spec == BRANDS["shop"]["sender"]
        assert render_mime(english)["Content-Language"] == "en"
        assert english.subject == "Reset your Acme Books password", "acme has no default: English, its own words"
        code, explained = cli_outcome(env, "explain", "--message-id", acme_reset["message_id"], "--tenant", "acme")
        assert code == 0 and "It was rendered with tenant settings version 1." in explained, explained

        takeovers = [getattr(record, FIELDS) for record in caplog.records
                     if record.getMessage() == "tenant mail or links redirected"]
        assert [(t["tenant"], t["fields"]) for t in takeovers] == [
            ("acme", "reply_to,reset_url,sender,sender_name"), ("shop", "reply_to,reset_url,sender,sender_name")]
        assert all("acme.example" not in json.dumps(t) and "shop.example" not in json.dumps(t) for t in takeovers)
        metrics = world.call(world.acme, "metrics", "GET", "/metrics").text
        assert 'authledger_tenant_takeover_changes_total{tenant="acme"} 1' in metrics
        assert "shop" not in metrics
    assert_projections_match_log(engine)


UNSAFE = {
    "http-reset-url": ({"reset_url": "http://books.acme.example/reset"}, "must use https://"),
    "display-name-trick": ({"sender": '"bank@x.com" <evil@y.com>'}, "single plain email address"),
    "name-as-address": ({"sender_name": '"bank@x.com"'}, "must not hold an address"),
    "unknown-placeholder": ({"templates": [{"locale": "en", "file": "reset_link.txt", "text": "$link $secret"}]},
                            "uses $secret"),
    "template-without-link": ({"templates": [{"locale": "de", "file": "reset_link.html", "text": "Hallo"}]},
                              "lacks $link"),
    "code-too-short": ({"otp_digits": 4}, None),  # the schema's bound (400 invalid-body), the domain's floor
}


@pytest.mark.parametrize(("change", "said"), UNSAFE.values(), ids=UNSAFE.keys())
def test_an_unsafe_change_over_http_is_refused_and_writes_nothing(
    ctx: ServiceContext, engine: Engine, change: dict[str, object], said: str | None
) -> None:
    with two_tenants(ctx) as world:
        configure(world, world.acme, {"product_name": "Acme Books"})
        before = events_digest(engine)
        history = world.call(world.acme, "admin", "GET", "/v1/admin/tenant").json()

        refused = world.call(world.acme, "admin", "PATCH", "/v1/admin/tenant", {**change, "reason": "OPS-39"})

        assert refused.status_code == 400, refused.text
        if said is not None:
            assert refused.json()["type"] == "urn:authledger:problem:invalid-input"
            assert said in refused.json()["detail"]
        assert events_digest(engine) == before
        assert world.call(world.acme, "admin", "GET", "/v1/admin/tenant").json() == history


def test_unsafe_changes_from_the_cli_are_refused_and_the_history_is_unchanged(
    ctx: ServiceContext, engine: Engine, env: Env, tmp_path: Path
) -> None:
    assert cli_outcome(env, "tenants", "create", "acme")[0] == 0
    assert cli_outcome(env, "tenants", "configure", "acme", "--product-name", "Acme Books", "--reason", "OPS-1")[0] == 0
    before = cli_outcome(env, "tenants", "show", "acme", "--history", "--json")
    bad_templates = tmp_path / "templates"
    (bad_templates / "de").mkdir(parents=True)
    (bad_templates / "de" / "otp_code.txt").write_text("Ihr Code: $code, $secret_question\n", encoding="utf-8")
    attempts = {
        "http-reset-url": (["--reset-url", "http://books.acme.example/reset"], "must use https://"),
        "display-name-trick": (["--sender", '"bank@x.com" <evil@y.com>'], "single plain email address"),
        "name-as-address": (["--sender-name", "bank@x.com"], "must not hold an address"),
        "unknown-placeholder": (["--template-dir", str(bad_templates)], "uses $secret_question"),
        "below-the-floor": (["--otp-digits", "5"], "otp_digits must be between 6 and 10"),
        "not-shipped-locale": (["--default-locale", "fr"], "one of the shipped locales en, de"),
    }
    for args, said in attempts.values():
        code, output = cli_outcome(env, "tenants", "configure", "acme", *args, "--reason", "OPS-2")
        assert code == 2 and said in output and "Traceback" not in output, output

    assert cli_outcome(env, "tenants", "show", "acme", "--history", "--json") == before
    assert json.loads(before[1])["version"] == 1
    assert_projections_match_log(engine)
