"""The ``tenants`` read model: the tenants created, one row each (the default tenant is never stored)."""

from __future__ import annotations

from datetime import datetime

from attrs import frozen

from domain.tenants import TenantCreated


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
