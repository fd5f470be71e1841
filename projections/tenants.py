"""The ``tenants`` read models: the tenants created, and each configured tenant's current settings.

``tenants`` holds one row per tenant created (the default tenant is never
stored); ``tenant_settings`` one row per tenant ever configured, the fold of
its ``TenantConfigured`` facts (``domain.tenants.evolve_settings``).
``settings_history`` tells, configuration by configuration, what changed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from attrs import frozen

from domain.tenants import (
    BRANDING_FIELDS,
    POLICY_FIELDS,
    SETTING_FIELDS,
    TAKEOVER_FIELDS,
    Purpose,
    TemplateOverride,
    TenantConfigured,
    TenantCreated,
    TenantSettings,
    evolve_settings,
)


@frozen
class TenantRow:
    name: str
    created_at: datetime


def tenant_key(event: object) -> str | None:
    return event.name if isinstance(event, TenantCreated) else None


def evolve_tenant(row: TenantRow | None, event: object) -> TenantRow | None:
    if isinstance(event, TenantCreated):
        return row or TenantRow(event.name, event.created_at)
    return row


@frozen
class TenantSettingsRow:
    tenant: str
    version: int  # configurations so far: the settings version an email could name
    purposes: str  # JSON object, purpose name -> display text, in declared order; {} for the deployment's
    configured_at: datetime
    overrides: str = "{}"  # JSON object of every other setting the tenant set (``overrides_text``)
    takeover_changes: int = 0  # configurations that changed where its links or mail go (TAKEOVER_FIELDS)

    @property
    def settings(self) -> TenantSettings:
        return settings_of(self.version, self.purposes, self.configured_at, self.overrides)


def overrides_text(settings: TenantSettings) -> str:
    """The settings besides the purposes as the ``overrides`` column holds them: the fields set, templates as
    ``[locale, file, text]`` triples."""
    data: dict[str, Any] = {name: value for name in (*BRANDING_FIELDS, *POLICY_FIELDS)
                            if (value := getattr(settings, name)) is not None}
    if settings.templates:
        data["templates"] = [[t.locale, t.file, t.text] for t in settings.templates]
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def settings_of(version: int, purposes: str, configured_at: datetime | None, overrides: str | None) -> TenantSettings:
    """A ``tenant_settings`` row's columns read back as the settings they hold."""
    data = json.loads(overrides or "{}")
    templates = tuple(TemplateOverride(*triple) for triple in data.pop("templates", ()))
    return TenantSettings(version=version, purposes=purposes_of(purposes), configured_at=configured_at,
                          templates=templates, **data)


def purposes_text(purposes: Iterable[Purpose]) -> str:
    """Purposes as the ``purposes`` column holds them."""
    return json.dumps({p.name: p.text for p in purposes}, ensure_ascii=False, separators=(",", ":"))


def purposes_of(column: str) -> tuple[Purpose, ...]:
    """The ``purposes`` column read back."""
    return tuple(Purpose(name, text) for name, text in json.loads(column).items())


def tenant_settings_key(event: object) -> str | None:
    return event.name if isinstance(event, TenantConfigured) else None


def evolve_tenant_settings(row: TenantSettingsRow | None, event: object) -> TenantSettingsRow | None:
    if not isinstance(event, TenantConfigured):
        return row
    settings = evolve_settings(row.settings if row is not None else TenantSettings(), event)
    assert settings.configured_at is not None
    takeovers = (row.takeover_changes if row is not None else 0) + bool(TAKEOVER_FIELDS & set(event.changed))
    return TenantSettingsRow(event.name, settings.version, purposes_text(settings.purposes), settings.configured_at,
                             overrides_text(settings), takeovers)


@frozen
class SettingsChange:
    """One configuration as history tells it: the version it made, who, why, and each field before and after."""

    version: int
    configured_at: datetime
    actor: str
    reason: str
    changes: dict[str, dict[str, Any]]  # field -> {"from": ..., "to": ...}


def shown(field: str, value: Any) -> Any:
    """A setting's value as history and ``show`` tell it (JSON-ready)."""
    if field == "purposes":
        return {p.name: p.text for p in value}
    if field == "templates":
        by_locale: dict[str, dict[str, str]] = {}
        for template in value:
            by_locale.setdefault(template.locale, {})[template.file] = template.text
        return by_locale
    return value


def settings_history(events: Iterable[object]) -> list[SettingsChange]:
    """Every configuration of a tenant's stream, oldest first, with what it changed."""
    settings, history = TenantSettings(), []
    for event in events:
        if not isinstance(event, TenantConfigured):
            continue
        after = evolve_settings(settings, event)
        changes = {field: {"from": shown(field, getattr(settings, field)), "to": shown(field, getattr(after, field))}
                   for field in SETTING_FIELDS if field in event.changed}
        history.append(SettingsChange(after.version, event.configured_at, event.actor, event.reason, changes))
        settings = after
    return history
