"""`authledger tenants configure` and `tenants show`: a tenant's OTP purposes, recorded with who, why and what.

Each change is a TenantConfigured fact on the tenant's stream; `show` reads
the current settings from their projection and the history from the log.
A bad purpose is refused in one line and nothing is recorded.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import Engine, text

from tests.support.cli import Env, cli_outcome
from tests.support.replay import assert_projections_match_log

DEPLOYMENT = {"login": "sign-in code", "verify_email": "email verification code",
              "mfa": "two-step verification code", "step_up": "confirmation code"}


# Every setting besides the purposes, when the tenant set none: the deployment's default applies.
NOTHING_SET = {**dict.fromkeys(("reset_url", "sender", "sender_name", "reply_to", "product_name", "support_contact",
                                "default_locale", "reset_ttl", "reset_cooldown", "reset_hourly_limit", "otp_ttl",
                                "otp_cooldown", "otp_hourly_limit", "otp_digits", "limit_per_address")),
               "templates": {}}


@pytest.fixture
def env(env: Env) -> Env:
    return {**env, "USER": "ops"}


def ok(env: Env, *args: str) -> dict:
    code, output = cli_outcome(env, *args, "--json")
    assert code == 0, output
    return json.loads(output)


def events(engine: Engine) -> list[tuple[str, str]]:
    with engine.connect() as connection:
        return [tuple(row) for row in connection.execute(text(
            "SELECT stream_id, event_type FROM events ORDER BY global_position"))]


@pytest.fixture
def acme(env: Env) -> None:
    assert cli_outcome(env, "tenants", "create", "acme")[0] == 0


def test_a_tenant_declares_purposes_and_show_lists_them_with_every_change_who_why_and_what(
    env: Env, engine: Engine, acme: None
) -> None:
    assert ok(env, "tenants", "show", "acme") == {
        "name": "acme", "version": 0, "configured_at": None, "purposes": DEPLOYMENT, "purposes_from": "deployment",
        **NOTHING_SET, "history": []}

    first = ok(env, "tenants", "configure", "acme", "--purpose", "checkout=payment approval code",
               "--purpose", "login= Acme sign-in code ", "--reason", "ticket OPS-7")
    assert first["recorded"] is True and first["version"] == 1
    assert first["purposes"] == {"checkout": "payment approval code", "login": "Acme sign-in code"}
    ok(env, "tenants", "configure", "acme", "--purpose", "checkout=payment approval code", "--reason", "OPS-9",
       "--actor", "grace")
    ok(env, "tenants", "configure", "acme", "--default-purposes", "--reason", "OPS-11")

    shown = ok(env, "tenants", "show", "acme")
    assert (shown["version"], shown["purposes"], shown["purposes_from"]) == (3, DEPLOYMENT, "deployment")
    history = shown["history"]
    assert [(h["version"], h["actor"], h["reason"]) for h in history] == [
        (1, "cli:ops", "ticket OPS-7"), (2, "cli:grace", "OPS-9"), (3, "cli:ops", "OPS-11")]
    assert [h["changes"] for h in history] == [
        {"purposes": {"from": {}, "to": {"checkout": "payment approval code", "login": "Acme sign-in code"}}},
        {"purposes": {"from": {"checkout": "payment approval code", "login": "Acme sign-in code"},
                      "to": {"checkout": "payment approval code"}}},
        {"purposes": {"from": {"checkout": "payment approval code"}, "to": {}}},
    ]
    assert shown["configured_at"] == history[-1]["configured_at"]
    assert [e for e in events(engine) if e[0] == "tenant:acme"] == [
        ("tenant:acme", "TenantCreated"), *[("tenant:acme", "TenantConfigured")] * 3]
    code, said = cli_outcome(env, "tenants", "show", "acme", "--history")
    assert code == 0 and "2. " in said and "by cli:grace (OPS-9)\n" in said and "purposes: checkout=payment " \
        "approval code, login=Acme sign-in code -> checkout=payment approval code" in said
    assert_projections_match_log(engine)


def test_the_same_purposes_again_record_nothing(env: Env, engine: Engine, acme: None) -> None:
    args = ("tenants", "configure", "acme", "--purpose", "checkout=payment approval code", "--reason", "OPS-7")
    ok(env, *args)
    before = events(engine)

    again = ok(env, *args)

    assert again["recorded"] is False and again["version"] == 1
    assert events(engine) == before


def test_the_default_tenant_is_configured_like_any_other(env: Env, engine: Engine) -> None:
    ok(env, "tenants", "configure", "default", "--purpose", "checkout=payment approval code", "--reason", "OPS-1")

    assert cli_outcome(env, "otp", "request", "--user-id", "42", "--email", "ada@example.test",
                       "--purpose", "checkout")[0] == 0
    before = events(engine)
    code, output = cli_outcome(env, "otp", "request", "--user-id", "42", "--email", "ada@example.test")
    assert (code, output) == (2, "Error: purpose 'login' is not declared for tenant 'default'; it allows checkout "
                                 "(`authledger tenants show default`)\n")
    assert events(engine) == before


BAD_PURPOSES = {
    "no-equals": ("checkout", "give a purpose as NAME=TEXT"),
    "empty-text": ("checkout=", "a purpose needs a display text"),
    "bad-name": ("check out=code", "a purpose name is 1-64 of"),
    "too-long": ("checkout=" + "x" * 61, "a display text is at most 60 characters; this one has 61"),
    "control": ("checkout=pay\x1bcode", "holds control characters"),
    "bidi": ("checkout=pay \u202ecode", "bidirectional control characters"),
    "invisible": ("checkout=pay\u200bcode", "invisible characters"),
    "address": ("checkout=ask ada@example.com", "holds an email address"),
    "fullwidth-at": ("checkout=code＠shop", "@ look-alike"),
    "link": ("checkout=see https://evil.test", "reads as a link"),
    "host-name": ("checkout=code for shop.example", "reads as a link"),
    "twice": ("checkout=a", "purpose 'checkout' is given twice"),
}


@pytest.mark.parametrize(("spec", "said"), BAD_PURPOSES.values(), ids=BAD_PURPOSES.keys())
def test_a_bad_purpose_is_refused_in_one_line_and_the_history_is_unchanged(
    env: Env, engine: Engine, acme: None, spec: str, said: str
) -> None:
    ok(env, "tenants", "configure", "acme", "--purpose", "checkout=payment approval code", "--reason", "OPS-7")
    before, shown = events(engine), ok(env, "tenants", "show", "acme")

    code, output = cli_outcome(env, "tenants", "configure", "acme", "--purpose", spec, "--purpose", "checkout=b",
                               "--reason", "OPS-8")

    assert code == 2 and said in output and len(output.strip().splitlines()) == 1, output
    assert "Traceback" not in output and "ada@example.com" not in output
    assert events(engine) == before
    assert ok(env, "tenants", "show", "acme") == shown


@pytest.mark.parametrize(("args", "said"), [
    (("--purpose", "a=b", "--reason", "asked by ada%40example.com"), "the reason holds an email address"),
    (("--purpose", "a=b", "--reason", "OPS-1", "--actor", "ada@example.com"), "the actor holds an email address"),
    (("--purpose", "a=b", "--reason", "   "), "a configuration needs a reason"),
    (("--purpose", "a=b"), "Missing option '--reason'"),
    (("--reason", "OPS-1"), "name a setting to change"),
    (("--purpose", "a=b", "--default-purposes", "--reason", "OPS-1"), "not both"),
])
def test_a_bad_reason_actor_or_request_is_refused_and_writes_nothing(
    env: Env, engine: Engine, acme: None, args: tuple[str, ...], said: str
) -> None:
    before = events(engine)

    code, output = cli_outcome(env, "tenants", "configure", "acme", *args)

    assert code == 2 and said in output, output
    assert "ada@example.com" not in output and "ada%40" not in output
    assert events(engine) == before


def test_an_unknown_tenant_is_neither_configured_nor_shown(env: Env, engine: Engine) -> None:
    for args in (("configure", "nope", "--purpose", "a=b", "--reason", "OPS-1"), ("show", "nope")):
        code, output = cli_outcome(env, "tenants", *args)
        assert code == 2 and "no tenant named 'nope'" in output
    assert events(engine) == []


def test_the_deployments_purposes_come_from_the_setting_and_a_bad_one_stops_start_up(
    env: Env, engine: Engine
) -> None:
    env = {**env, "AUTHLEDGER_OTP_PURPOSES": "signup=sign-up code, login=sign-in code"}
    assert ok(env, "tenants", "show", "default")["purposes"] == {"signup": "sign-up code", "login": "sign-in code"}
    assert cli_outcome(env, "otp", "request", "--user-id", "42", "--email", "ada@example.test",
                       "--purpose", "signup")[0] == 0
    assert cli_outcome(env, "otp", "request", "--user-id", "43", "--email", "ada@example.test",
                       "--purpose", "mfa")[0] == 2

    code, output = cli_outcome({**env, "AUTHLEDGER_OTP_PURPOSES": "login=see https://evil.test"},
                               "tenants", "show", "default")
    assert code == 78 and "AUTHLEDGER_OTP_PURPOSES the display text reads as a link" in output
