"""Tenants: the applications that own users. Created by events on ``tenant:<name>``; the default always exists."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from attrs import frozen
from sqlalchemy import Engine, select

from domain.errors import InvalidInput
from domain.tenants import DEFAULT_TENANT, check_tenant_name, decide_create_tenant, tenant_exists, tenant_stream
from infra.db import tables
from infra.services.unit_of_work import ServiceContext, decide_events_on_stream


@frozen
class Tenant:
    name: str
    created_at: datetime | None  # None: the default tenant, which was never created


def create_tenant(ctx: ServiceContext, name: str, metadata: Mapping[str, Any] | None = None) -> Tenant:
    """Create a tenant; ``InvalidInput`` for a bad name or one that exists."""
    check_tenant_name(name)
    [created] = decide_events_on_stream(ctx, tenant_stream(name), tenant_exists,
                                        lambda exists, now: decide_create_tenant(exists, name, now=now), metadata)
    return Tenant(created.name, created.created_at)


def list_tenants(engine: Engine) -> list[Tenant]:
    """The default tenant first, then every tenant created, by name."""
    query = select(tables.tenants).order_by(tables.tenants.c.name)
    with engine.connect() as connection:
        created = [Tenant(row.name, row.created_at) for row in connection.execute(query)]
    return [Tenant(DEFAULT_TENANT, None), *created]


def require_tenant(engine: Engine, name: str) -> None:
    """``InvalidInput`` unless ``name`` is the default tenant or one that was created (tenants are never removed)."""
    if name == DEFAULT_TENANT:
        return
    query = select(tables.tenants.c.name).where(tables.tenants.c.name == name)
    with engine.connect() as connection:
        if connection.execute(query).scalar() is None:
            raise InvalidInput(f"no tenant named {name!r}; create it with `authledger tenants create {name}`")
