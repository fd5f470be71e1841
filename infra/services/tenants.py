"""Tenants: the applications that own users, and their settings. Events on ``tenant:<name>``; the default always
exists.

A tenant's settings are ``TenantConfigured`` facts on its stream, folded
inline into ``tenant_settings``. ``TenantRules`` reads them in a create's
own transaction: the deployment's rules with the tenant's overrides, and
whether it allows a code's purpose; ``settings_of_tenants`` gives the worker each email's tenant's
settings (branding, templates, display texts), read fresh at send time. A
change of where a tenant's links or mail go is logged at WARNING.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import Any, TypeVar

from attrs import frozen
from sqlalchemy import Connection, Engine, bindparam, select

from domain.errors import ConfigError, InvalidInput, PurposeUnknown, TenantUnknown
from domain.policy import OtpPolicy, ResetPolicy, with_overrides
from domain.send_limits import SendLimits
from domain.tenants import (
    DEFAULT_TENANT,
    BRANDING_FIELDS,
    POLICY_FIELDS,
    TAKEOVER_FIELDS,
    Purpose,
    TenantConfigured,
    TenantSettings,
    TenantState,
    allowed_purposes,
    check_tenant_name,
    decide_configure_tenant,
    decide_create_tenant,
    evolve_settings,
    fold_tenant,
    tenant_exists,
    tenant_stream,
)
from infra.db import tables
from infra.db.pipeline import Pending, execute_deferred
from infra.eventlog.postgres import PostgresEventStore
from infra.logs import log_event
from infra.services.unit_of_work import ServiceContext, StreamOf, decide_events_on_stream
from projections.tenants import SettingsChange, settings_history, settings_of, shown

log = logging.getLogger("authledger.tenants")

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
    changed: tuple[str, ...] = ()  # the settings this call set or cleared


def configure_tenant(
    ctx: ServiceContext, name: str, *, changes: Mapping[str, Any], actor: str, reason: str,
    metadata: Mapping[str, Any] | None = None,
) -> Configured:
    """Set a tenant's settings: each of ``changes`` (``domain.tenants.SETTING_FIELDS``) to its value, or back
    to the deployment's for None.

    ``InvalidInput``, with nothing recorded, for an unknown tenant, no
    setting, a value its setting's rule refuses (``domain.tenants.check_setting``),
    a bad actor or reason, or policy overrides that together break a rule
    (a per-address limit at or below the deployment's per-IP share of it).
    Settings already so record nothing. A change of where links or mail go
    (``TAKEOVER_FIELDS``) is logged at WARNING: tenant, actor and fields, never a value.
    """
    check_tenant_name(name)

    def decide(state: TenantState, now: datetime) -> list[TenantConfigured]:
        events = decide_configure_tenant(state, name, changes=changes, actor=actor, reason=reason, now=now)
        for event in events:
            tenant_policies(ctx, evolve_settings(state.settings, event))  # refuse overrides that break a rule
        return events

    recorded = decide_events_on_stream(ctx, tenant_stream(name), fold_tenant(name), decide, metadata)
    changed = recorded[0].changed if recorded else ()
    if takeover := sorted(TAKEOVER_FIELDS & set(changed)):
        log_event(log, "tenant mail or links redirected", logging.WARNING, tenant=name, actor=recorded[0].actor,
                  fields=",".join(takeover), version=show_tenant(ctx, name).settings.version)
    return Configured(show_tenant(ctx, name), bool(recorded), changed)


@frozen
class TenantPolicies:
    """The rules a tenant's requests are decided by: the deployment's, with the tenant's overrides."""

    reset: ResetPolicy
    otp: OtpPolicy
    send_limits: SendLimits


def tenant_policies(ctx: ServiceContext, settings: TenantSettings) -> TenantPolicies:
    """The deployment's policies with ``settings``' overrides; ``InvalidInput`` when together they break a rule."""
    overrides = settings.policy_overrides()
    try:
        return TenantPolicies(with_overrides(ctx.reset_policy, "reset", overrides),
                              with_overrides(ctx.otp_policy, "otp", overrides),
                              with_overrides(ctx.send_limits, "send_limits", overrides))
    except ConfigError as error:
        raise InvalidInput(f"the tenant's rules would break one across them: {error.message}") from None


def settings_data(view: TenantView) -> dict[str, Any]:
    """A tenant's settings as ``show --json`` and the HTTP API give them: None for the deployment's default."""
    settings, configured_at = view.settings, view.settings.configured_at
    return {"name": view.name, "version": settings.version,
            "configured_at": configured_at.isoformat() if configured_at else None,
            **{field: shown(field, getattr(settings, field)) for field in (*BRANDING_FIELDS, *POLICY_FIELDS)},
            "templates": shown("templates", settings.templates),
            "purposes": {p.name: p.text for p in view.purposes}, "purposes_from": view.purposes_from}


def change_data(change: SettingsChange) -> dict[str, Any]:
    """One change as ``show --json`` and the HTTP API give it."""
    return {"version": change.version, "configured_at": change.configured_at.isoformat(), "actor": change.actor,
            "reason": change.reason, "changes": change.changes,
            "takeover": bool(TAKEOVER_FIELDS & set(change.changes))}


SETTINGS_OF = select(tables.tenant_settings).where(tables.tenant_settings.c.tenant == bindparam("tenant"))


def _settings(connection: Connection, name: str) -> TenantSettings:
    row = connection.execute(SETTINGS_OF, {"tenant": name}).first()
    return _row_settings(row) if row is not None else TenantSettings()


def _row_settings(row: Any) -> TenantSettings:
    return settings_of(row.version, row.purposes, row.configured_at, row.overrides)


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


class TenantRules:
    """A tenant's settings as a create's decision needs them, read in the request's own transaction at no wait
    of its own: the rules it is decided by (the deployment's, with the tenant's overrides) and, for a code,
    whether the tenant allows its purpose.

    ``asked_with`` sends the look-up of the tenant's settings ahead of the
    stream's read (``decide_on_stream``'s look-up), so that its answer comes
    back with the read; ``before`` judges the purpose before the decision, and
    ``policies`` is known from then on. ``PurposeUnknown`` ends the
    transaction with nothing written.
    """

    def __init__(self, ctx: ServiceContext, tenant: str, purpose: str | None = None) -> None:
        self.ctx, self.tenant, self.purpose = ctx, tenant, purpose
        self._asked: Pending | None = None
        self._policies: TenantPolicies | None = None

    def asked_with(self, stream_id: str) -> StreamOf:
        def stream_of(connection: Connection) -> str:
            self._asked = execute_deferred(connection, SETTINGS_OF, {"tenant": self.tenant}, answer=True)
            self._policies = None  # a retried transaction reads them again
            return stream_id

        return stream_of

    def settings(self) -> TenantSettings:
        """The tenant's settings (once the stream's read has waited)."""
        assert self._asked is not None, "asked_with's look-up runs first"
        rows = self._asked.all()
        return _row_settings(rows[0]) if rows else TenantSettings()

    def policies(self) -> TenantPolicies:
        """The rules the request is decided by (once the stream's read has waited)."""
        if self._policies is None:
            self._policies = tenant_policies(self.ctx, self.settings())
        return self._policies

    def require_purpose(self) -> None:
        """``PurposeUnknown`` unless the tenant allows the purpose (a reset names none)."""
        if self.purpose is None:
            return
        allowed = allowed_purposes(self.settings().purposes, self.ctx.otp_purposes)
        if self.purpose not in {p.name for p in allowed}:
            raise PurposeUnknown(f"purpose {self.purpose!r} is not declared for tenant {self.tenant!r}; it allows "
                                 f"{', '.join(p.name for p in allowed)} (`authledger tenants show {self.tenant}`)")

    def before(self, decide: Callable[..., Decided]) -> Callable[..., Decided]:
        """``decide``, given the tenant's policies as ``policies`` once the purpose (if any) is found allowed."""
        def checked(*args: Any, **kwargs: Any) -> Decided:
            self.require_purpose()
            return decide(*args, policies=self.policies(), **kwargs)

        return checked


SETTINGS_OF_TENANTS = select(tables.tenant_settings).where(
    tables.tenant_settings.c.tenant.in_(bindparam("tenants", expanding=True)))


def settings_of_tenants(connection: Connection, tenants: Collection[str]) -> dict[str, TenantSettings]:
    """Each tenant's settings now (``TenantSettings()`` for one never configured), in one statement."""
    if not tenants:
        return {}
    found = {row.tenant: _row_settings(row)
             for row in connection.execute(SETTINGS_OF_TENANTS, {"tenants": sorted(tenants)})}
    return {tenant: found.get(tenant, TenantSettings()) for tenant in tenants}


def display_texts(settings: TenantSettings, defaults: tuple[Purpose, ...]) -> dict[str, str]:
    """Purpose name -> display text of the purposes a tenant with ``settings`` allows now."""
    return {p.name: p.text for p in allowed_purposes(settings.purposes, defaults)}


TAKEOVERS = select(tables.tenant_settings.c.tenant, tables.tenant_settings.c.takeover_changes).where(
    tables.tenant_settings.c.takeover_changes > 0)


def takeover_changes(engine: Engine, tenant: str | None = None) -> dict[str, int]:
    """Tenant -> configurations that changed where its links or mail go, for tenants with any (or ``tenant``)."""
    query = TAKEOVERS if tenant is None else TAKEOVERS.where(tables.tenant_settings.c.tenant == tenant)
    with engine.connect() as connection:
        return {row.tenant: row.takeover_changes for row in connection.execute(query)}
