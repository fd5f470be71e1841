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

from domain.tenants import SETTING_FIELDS, Purpose, TenantConfigured, TenantCreated, TenantSettings, evolve_settings


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

    @property
    def settings(self) -> TenantSettings:
        return TenantSettings(self.version, purposes_of(self.purposes), self.configured_at)


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
    return TenantSettingsRow(event.name, settings.version, purposes_text(settings.purposes), settings.configured_at)


@frozen
class SettingsChange:
    """One configuration as history tells it: the version it made, who, why, and each field before and after."""

    version: int
    configured_at: datetime
    actor: str
    reason: str
    changes: dict[str, dict[str, Any]]  # field -> {"from": ..., "to": ...}


def _shown(field: str, value: Any) -> Any:
    if field == "purposes":
        return {p.name: p.text for p in value}
    return value


def settings_history(events: Iterable[object]) -> list[SettingsChange]:
    """Every configuration of a tenant's stream, oldest first, with what it changed."""
    settings, history = TenantSettings(), []
    for event in events:
        if not isinstance(event, TenantConfigured):
            continue
        after = evolve_settings(settings, event)
        changes = {field: {"from": _shown(field, getattr(settings, field)), "to": _shown(field, getattr(after, field))}
                   for field in SETTING_FIELDS if field in event.changed}
        history.append(SettingsChange(after.version, event.configured_at, event.actor, event.reason, changes))
        settings = after
    return history
