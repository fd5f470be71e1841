"""Tenants: the applications that own users, and their settings. Events on ``tenant:<name>``; the default always
exists.

A tenant's settings are ``TenantConfigured`` facts on its stream, folded
inline into ``tenant_settings``. Today they hold the OTP purposes it allows:
``PurposeCheck`` refuses a code for any other in the request's own
transaction, and ``display_texts`` gives the worker the words its emails
use for each, read fresh at send time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import Any, TypeVar

from attrs import frozen
from sqlalchemy import Connection, Engine, bindparam, select

from domain.errors import PurposeUnknown, TenantUnknown
from domain.tenants import (
    DEFAULT_TENANT,
    Purpose,
    TenantSettings,
    allowed_purposes,
    check_tenant_name,
    decide_configure_tenant,
    decide_create_tenant,
    fold_tenant,
    tenant_exists,
    tenant_stream,
)
from infra.db import tables
from infra.db.pipeline import Pending, execute_deferred
from infra.eventlog.postgres import PostgresEventStore
from infra.services.unit_of_work import ServiceContext, StreamOf, decide_events_on_stream
from projections.tenants import SettingsChange, TenantSettingsRow, purposes_of, settings_history

Decided = TypeVar("Decided")


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
    """``TenantUnknown`` unless ``name`` is the default tenant or one that was created (tenants are never removed)."""
    if name == DEFAULT_TENANT:
        return
    query = select(tables.tenants.c.name).where(tables.tenants.c.name == name)
    with engine.connect() as connection:
        if connection.execute(query).scalar() is None:
            raise TenantUnknown(f"no tenant named {name!r}; create it with `authledger tenants create {name}`")


# -- settings -----------------------------------------------------------------------------------------


@frozen
class TenantView:
    """A tenant's settings now: what it declared, and what it allows (the deployment's while it declares none)."""

    name: str
    settings: TenantSettings
    purposes: tuple[Purpose, ...]  # allowed now
    purposes_from: str  # "tenant" (declared) or "deployment" (AUTHLEDGER_OTP_PURPOSES)


@frozen
class Configured:
    """The outcome of ``configure_tenant``: the settings now, and whether this call changed them."""

    tenant: TenantView
    recorded: bool


def configure_tenant(
    ctx: ServiceContext, name: str, *, purposes: tuple[Purpose, ...] | None, actor: str, reason: str,
    metadata: Mapping[str, Any] | None = None,
) -> Configured:
    """Set a tenant's settings (``purposes``: the OTP purposes it allows; () for the deployment's).

    ``InvalidInput``, with nothing recorded, for an unknown tenant, no
    setting, a bad purpose, actor or reason. Settings already so record nothing.
    """
    check_tenant_name(name)
    recorded = decide_events_on_stream(
        ctx, tenant_stream(name), fold_tenant(name),
        lambda state, now: decide_configure_tenant(state, name, purposes=purposes, actor=actor, reason=reason,
                                                   now=now),
        metadata)
    return Configured(show_tenant(ctx, name), bool(recorded))


SETTINGS_OF = select(tables.tenant_settings).where(tables.tenant_settings.c.tenant == bindparam("tenant"))


def _settings(connection: Connection, name: str) -> TenantSettings:
    row = connection.execute(SETTINGS_OF, {"tenant": name}).first()
    return TenantSettingsRow(**row._asdict()).settings if row is not None else TenantSettings()


def show_tenant(ctx: ServiceContext, name: str) -> TenantView:
    """A tenant's settings now; ``InvalidInput`` for a tenant that does not exist."""
    check_tenant_name(name)
    require_tenant(ctx.engine, name)
    with ctx.engine.connect() as connection:
        settings = _settings(connection, name)
    return TenantView(name, settings, allowed_purposes(settings.purposes, ctx.otp_purposes),
                      "tenant" if settings.purposes else "deployment")


def tenant_history(ctx: ServiceContext, name: str) -> list[SettingsChange]:
    """Every configuration of a tenant, oldest first: when, who, why and what changed."""
    check_tenant_name(name)
    require_tenant(ctx.engine, name)
    with ctx.engine.connect() as connection:
        return settings_history(r.event for r in PostgresEventStore(connection).load(tenant_stream(name)))


DECLARED = select(tables.tenant_settings.c.purposes).where(tables.tenant_settings.c.tenant == bindparam("tenant"))


class PurposeCheck:
    """Whether a tenant allows a purpose, judged in an OTP request's own transaction at no wait of its own.

    ``asked_with`` sends the look-up of the tenant's purposes ahead of the
    stream's read (``decide_on_stream``'s look-up), so that its answer comes
    back with the read; ``before`` judges it before the decision.
    ``PurposeUnknown`` then ends the transaction with nothing written.
    """

    def __init__(self, ctx: ServiceContext, tenant: str, purpose: str) -> None:
        self.defaults, self.tenant, self.purpose = ctx.otp_purposes, tenant, purpose
        self._declared: Pending | None = None

    def asked_with(self, stream_id: str) -> StreamOf:
        def stream_of(connection: Connection) -> str:
            self._declared = execute_deferred(connection, DECLARED, {"tenant": self.tenant}, answer=True)
            return stream_id

        return stream_of

    def require(self) -> None:
        """``PurposeUnknown`` unless the tenant allows the purpose (once the stream's read has waited)."""
        assert self._declared is not None, "asked_with's look-up runs first"
        rows = self._declared.all()
        declared = tuple(purposes_of(rows[0][0])) if rows else ()
        allowed = allowed_purposes(declared, self.defaults)
        if self.purpose not in {p.name for p in allowed}:
            raise PurposeUnknown(f"purpose {self.purpose!r} is not declared for tenant {self.tenant!r}; it allows "
                                 f"{', '.join(p.name for p in allowed)} (`authledger tenants show {self.tenant}`)")

    def before(self, decide: Callable[..., Decided]) -> Callable[..., Decided]:
        """``decide``, run once the purpose is found allowed."""
        def checked(*args: Any, **kwargs: Any) -> Decided:
            self.require()
            return decide(*args, **kwargs)

        return checked


DECLARED_PURPOSES = select(tables.tenant_settings.c.tenant, tables.tenant_settings.c.purposes).where(
    tables.tenant_settings.c.tenant.in_(bindparam("tenants", expanding=True)))


def display_texts(connection: Connection, tenants: Collection[str], defaults: tuple[Purpose, ...]
                  ) -> dict[str, dict[str, str]]:
    """For each tenant, purpose name -> display text of the purposes it allows now, in one statement."""
    if not tenants:
        return {}
    declared = {row.tenant: json.loads(row.purposes)
                for row in connection.execute(DECLARED_PURPOSES, {"tenants": sorted(tenants)})}
    fallback = {p.name: p.text for p in defaults}
    return {tenant: declared.get(tenant) or fallback for tenant in tenants}
