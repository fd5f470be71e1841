"""Tenants: the applications that own users. User ids are scoped per tenant.

A user id means something only inside its tenant: ``u1`` of tenant ``acme``
and ``u1`` of tenant ``shop`` are two people. Everything below the edges
(streams, events, projections) carries the *scoped* user id, so two tenants'
users can never share a stream, a rate limit or a link.

The default tenant's scoped ids are the bare user ids, which is what a
database from before tenants holds: its streams keep their names and every
old link and code still verifies. Another tenant's scoped id is
``"<tenant> <user_id>"``. A space can never occur in a user id (the API and
CLI refuse whitespace), so no default-tenant id can be mistaken for another
tenant's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

from attrs import frozen

from domain.input_checks import require_utc
from domain.errors import InvalidInput

DEFAULT_TENANT = "default"
TENANT_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
SEPARATOR = " "


def check_tenant_name(name: object) -> str:
    """The name, or ``InvalidInput`` unless it is 1-63 of a-z, 0-9, '.', '_', '-' (starting alphanumeric)."""
    if not isinstance(name, str) or not TENANT_NAME.fullmatch(name):
        raise InvalidInput(
            "a tenant name is 1-63 characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit"
        )
    return name


def scoped_user(tenant: str, user_id: str) -> str:
    """The id that streams and events use for ``user_id`` of ``tenant``."""
    return user_id if tenant == DEFAULT_TENANT else f"{tenant}{SEPARATOR}{user_id}"


def split_scoped_user(scoped: str) -> tuple[str, str]:
    """``(tenant, user_id)`` of a scoped id: the inverse of ``scoped_user``."""
    tenant, separator, user_id = scoped.partition(SEPARATOR)
    return (tenant, user_id) if separator else (DEFAULT_TENANT, scoped)


def tenant_of(scoped: str) -> str:
    return split_scoped_user(scoped)[0]


def tenant_stream(name: str) -> str:
    """The stream id recording that a tenant was created."""
    return f"tenant:{name}"


@frozen
class TenantCreated:
    name: str
    created_at: datetime


def tenant_exists(events: Iterable[object]) -> bool:
    """The fold of a tenant stream: whether the tenant was created."""
    return any(isinstance(event, TenantCreated) for event in events)


def decide_create_tenant(exists: bool, name: str, *, now: datetime) -> list[object]:
    """Create tenant ``name``; ``InvalidInput`` when it exists (the default tenant always does)."""
    require_utc(now)
    check_tenant_name(name)
    if exists or name == DEFAULT_TENANT:
        raise InvalidInput(f"a tenant named {name!r} already exists")
    return [TenantCreated(name, now)]
