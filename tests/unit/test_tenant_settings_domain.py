"""A tenant's settings as given events, when a configuration, then events: pure, no database."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from domain.errors import InvalidInput
from domain.tenants import (
    DEFAULT_PURPOSES,
    Purpose,
    TenantConfigured,
    TenantCreated,
    TenantSettings,
    allowed_purposes,
    decide_configure_tenant,
    fold_tenant,
    parse_purpose_list,
    purpose_list_text,
)
from projections.tenants import evolve_tenant_settings, purposes_of, settings_history

T0 = datetime(2030, 1, 1, tzinfo=UTC)
LOGIN = Purpose("login", "sign-in code")
CHECKOUT = Purpose("checkout", "payment approval code")


def configured(*purposes: Purpose, reason: str = "OPS-1") -> TenantConfigured:
    return TenantConfigured("acme", T0, "cli:ops", reason, purposes)


def when(given: list[object], purposes: tuple[Purpose, ...] | None, name: str = "acme") -> list[TenantConfigured]:
    changes = {"purposes": purposes} if purposes is not None else {}
    return decide_configure_tenant(fold_tenant(name)(given), name, changes=changes, actor="cli:ops",
                                   reason="OPS-2", now=T0)


def test_a_created_tenant_declares_purposes_and_the_fold_gives_them_back() -> None:
    [event] = when([TenantCreated("acme", T0)], (CHECKOUT, LOGIN))

    assert event == TenantConfigured("acme", T0, "cli:ops", "OPS-2", (CHECKOUT, LOGIN))
    assert event.changed == ("purposes",)
    assert fold_tenant("acme")([TenantCreated("acme", T0), event]).settings == TenantSettings(1, (CHECKOUT, LOGIN), T0)


def test_the_default_tenant_exists_without_being_created() -> None:
    assert when([], (LOGIN,), name="default") != []


def test_a_tenant_never_created_is_refused() -> None:
    with pytest.raises(InvalidInput, match="no tenant named 'acme'"):
        when([], (LOGIN,))


def test_the_same_purposes_again_decide_nothing_and_no_setting_is_refused() -> None:
    given = [TenantCreated("acme", T0), configured(CHECKOUT)]
    assert when(given, (CHECKOUT,)) == []
    with pytest.raises(InvalidInput, match="name a setting"):
        when(given, None)


def test_a_declaration_replaces_the_deployments_purposes_and_none_gives_them_back() -> None:
    assert allowed_purposes((CHECKOUT,), DEFAULT_PURPOSES) == (CHECKOUT,)
    assert allowed_purposes((), DEFAULT_PURPOSES) == DEFAULT_PURPOSES
    [back] = when([TenantCreated("acme", T0), configured(CHECKOUT)], ())
    assert back.purposes == () and back.changed == ("purposes",)


def test_purposes_built_in_code_pass_the_same_checks_as_typed_ones() -> None:
    with pytest.raises(InvalidInput, match="reads as a link"):
        when([TenantCreated("acme", T0)], (Purpose("checkout", "pay at shop.example"),))


def test_the_projection_row_and_the_history_follow_the_fold() -> None:
    events = [configured(CHECKOUT, LOGIN), configured(CHECKOUT, reason="OPS-3"), configured(reason="OPS-4")]
    row = None
    for event in events:
        row = evolve_tenant_settings(row, event)

    assert row is not None and (row.version, purposes_of(row.purposes)) == (3, ())
    assert [(h.version, h.reason, h.changes["purposes"]["to"]) for h in settings_history(events)] == [
        (1, "OPS-1", {"checkout": "payment approval code", "login": "sign-in code"}),
        (2, "OPS-3", {"checkout": "payment approval code"}),
        (3, "OPS-4", {}),
    ]


def test_the_deployments_purposes_round_trip_through_their_setting_text() -> None:
    assert parse_purpose_list(purpose_list_text(DEFAULT_PURPOSES)) == DEFAULT_PURPOSES
    with pytest.raises(InvalidInput, match="names no purpose"):
        parse_purpose_list(" , ")
