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

A tenant's settings are ``TenantConfigured`` facts on its stream (the
default tenant's too, on ``tenant:default``), each naming the fields it
set (or cleared back to the deployment's), who set them and why; their fold
is the tenant's current settings (``TenantSettings``, its ``version`` the
number of facts folded). Besides the purposes below, a tenant sets its
branding (reset URL, sender, reply-to, product name, support contact,
default locale), template overrides per locale and policy overrides; each
value is judged by the one rule its deployment-wide setting is judged by
(``check_setting``: ``domain.branding``, ``domain.templates``,
``domain.policy``). One setting is the allow-list of OTP purposes (``Purpose``): a code
may be asked for only for a declared purpose, and its email names the code
by the purpose's display text, so nothing a caller writes reaches an email.
A tenant that declares none has the deployment's purposes
(``AUTHLEDGER_OTP_PURPOSES``); a tenant's declaration replaces them whole,
so that a tenant allows exactly the purposes it names and no default it
never asked for.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

import attrs
from attrs import frozen

from domain.branding import (
    check_locale,
    check_mailbox,
    check_product_name,
    check_reset_url,
    check_sender_name,
    check_support_contact,
)
from domain.characters import readable_form
from domain.errors import InvalidInput
from domain.input_checks import check_actor, free_text_problem, operator_reason, require_utc
from domain.policy import POLICY_OVERRIDES, check_override
from domain.templates import template_problem

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


def decide_create_tenant(exists: bool, name: str, *, now: datetime) -> list[TenantCreated]:
    """Create tenant ``name``; ``InvalidInput`` when it exists (the default tenant always does)."""
    require_utc(now)
    check_tenant_name(name)
    if exists or name == DEFAULT_TENANT:
        raise InvalidInput(f"a tenant named {name!r} already exists")
    return [TenantCreated(name, now)]


# -- settings: OTP purposes ---------------------------------------------------------------------------

PURPOSE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")  # as the API's schema states it (infra/http/schemas.py)
PURPOSE_NAME_RULE = "a purpose name is 1-64 of A-Z, a-z, 0-9, '_', '.', ':' and '-'"
# A display text names the code in a subject line ("Your sign-in code"): short, so the subject stays readable.
MAX_DISPLAY_TEXT = 60
MAX_PURPOSES = 20  # a tenant's allow-list, not a vocabulary: its event and every email's look-up stay small
# A link in a display text would be a link in a genuine-looking email: a scheme, "www." or a host name.
_LINK_LIKE = re.compile(r"://|\bwww\.|\b[a-z0-9-]+(?:\.[a-z0-9-]+)*\.[a-z]{2,}\b", re.IGNORECASE)
# What an email calls a code whose purpose is no longer declared when the worker renders it.
UNDECLARED_CODE_NAME = "one-time code"


@frozen
class Purpose:
    """An OTP purpose a tenant allows: its ``name`` in API calls, and the ``text`` its emails call the code."""

    name: str
    text: str


def check_purpose_name(name: object) -> str:
    """The name, or ``InvalidInput`` unless it is a short slug (``PURPOSE_NAME_RULE``)."""
    if not isinstance(name, str) or not PURPOSE_NAME.fullmatch(name):
        raise InvalidInput(PURPOSE_NAME_RULE)
    return name


def check_display_text(text: object) -> str:
    """The display text, trimmed; ``InvalidInput`` unless it is a short line of plain printable text with
    no control or bidirectional characters, no email address and nothing that reads as a link."""
    text = text.strip() if isinstance(text, str) else ""
    if not text:
        raise InvalidInput("a purpose needs a display text, e.g. login=sign-in code")
    if len(text) > MAX_DISPLAY_TEXT:
        raise InvalidInput(f"a display text is at most {MAX_DISPLAY_TEXT} characters; this one has {len(text)}")
    if problem := free_text_problem(text, what="the display text"):
        raise InvalidInput(problem)
    if not text.replace(" ", "").isprintable():
        raise InvalidInput("the display text holds invisible characters; give it as plain printable text")
    if _LINK_LIKE.search(readable_form(text) or text):
        raise InvalidInput("the display text reads as a link or a host name; emails must carry no link of it")
    return text


def parse_purpose(spec: str) -> Purpose:
    """``NAME=TEXT`` as a ``Purpose``; ``InvalidInput`` for a missing ``=``, a bad name or a bad text."""
    name, equals, text = spec.partition("=")
    if not equals:
        raise InvalidInput("give a purpose as NAME=TEXT, e.g. login=sign-in code")
    return Purpose(check_purpose_name(name.strip()), check_display_text(text))


def parse_purposes(specs: Iterable[str]) -> tuple[Purpose, ...]:
    """Each ``NAME=TEXT`` parsed, in order; ``InvalidInput`` for a bad one, a name given twice or too many."""
    purposes = tuple(parse_purpose(spec) for spec in specs)
    names = [p.name for p in purposes]
    if twice := sorted({name for name in names if names.count(name) > 1}):
        raise InvalidInput(f"purpose {twice[0]!r} is given twice")
    if len(purposes) > MAX_PURPOSES:
        raise InvalidInput(f"a tenant declares at most {MAX_PURPOSES} purposes; {len(purposes)} were given")
    return purposes


def parse_purpose_list(raw: str) -> tuple[Purpose, ...]:
    """``NAME=TEXT,NAME=TEXT``: the deployment's purposes as a setting holds them (a text holds no comma)."""
    purposes = parse_purposes(part for part in raw.split(",") if part.strip())
    if not purposes:
        raise InvalidInput("names no purpose; give NAME=TEXT pairs separated by commas")
    return purposes


# The deployment's purposes unless AUTHLEDGER_OTP_PURPOSES says otherwise: the
# flows an application commonly asks codes for, named as the emails name them.
DEFAULT_PURPOSES = (
    Purpose("login", "sign-in code"),
    Purpose("verify_email", "email verification code"),
    Purpose("mfa", "two-step verification code"),
    Purpose("step_up", "confirmation code"),
)


def purpose_list_text(purposes: Iterable[Purpose]) -> str:
    """The ``NAME=TEXT,...`` form of ``purposes``: the inverse of ``parse_purpose_list``."""
    return ",".join(f"{p.name}={p.text}" for p in purposes)


@frozen
class TemplateOverride:
    """One template file a tenant's emails in ``locale`` use instead of the deployment's."""

    locale: str
    file: str  # "reset_link.subject", "otp_code.html"...
    text: str


def check_template_overrides(overrides: Iterable[TemplateOverride]) -> tuple[TemplateOverride, ...]:
    """The overrides, ordered by locale and file; ``InvalidInput`` naming the first that breaks the one template
    rule (``domain.templates.template_problem``), a locale that does not ship, or a file given twice."""
    checked: dict[tuple[str, str], TemplateOverride] = {}
    for override in overrides:
        locale = check_locale(override.locale)
        if (problem := template_problem(override.file, override.text)) is not None:
            raise InvalidInput(f"email template {locale}/{override.file} {problem}")
        if (locale, override.file) in checked:
            raise InvalidInput(f"email template {locale}/{override.file} is given twice")
        if len(override.text) > MAX_TEMPLATE:
            raise InvalidInput(f"email template {locale}/{override.file} is over {MAX_TEMPLATE} characters")
        checked[locale, override.file] = TemplateOverride(locale, override.file, override.text)
    return tuple(checked[key] for key in sorted(checked))


MAX_TEMPLATE = 20_000  # an email's part; the settings fact stays small enough to read on every send


@frozen
class TenantConfigured:
    """A tenant's settings were changed: the fields set (None: left as they were), by whom and why.

    ``cleared`` names the settings given back to the deployment's default.
    Every value was checked by the rule its deployment-wide setting passes
    (``check_setting``) before this fact was decided.
    """

    name: str  # the tenant
    configured_at: datetime
    actor: str
    reason: str
    # The tenant's OTP purposes from now on; () gives it back the deployment's purposes.
    purposes: tuple[Purpose, ...] | None = None
    reset_url: str | None = None
    sender: str | None = None  # the From address of its emails
    sender_name: str | None = None  # the From line's display name
    reply_to: str | None = None
    product_name: str | None = None
    support_contact: str | None = None
    default_locale: str | None = None
    templates: tuple[TemplateOverride, ...] | None = None  # the whole set from now on; () for none
    reset_ttl: int | None = None
    reset_cooldown: int | None = None
    reset_hourly_limit: int | None = None
    otp_ttl: int | None = None
    otp_cooldown: int | None = None
    otp_hourly_limit: int | None = None
    otp_digits: int | None = None
    limit_per_address: int | None = None
    cleared: tuple[str, ...] = ()

    @property
    def changed(self) -> tuple[str, ...]:
        """The names of the settings this configuration set or cleared."""
        return tuple(name for name in SETTING_FIELDS if getattr(self, name) is not None or name in self.cleared)


BRANDING_FIELDS = ("reset_url", "sender", "sender_name", "reply_to", "product_name", "support_contact",
                   "default_locale")
POLICY_FIELDS = tuple(POLICY_OVERRIDES)
# The fields of TenantConfigured that are settings, in the order shown.
SETTING_FIELDS = (*BRANDING_FIELDS, "purposes", "templates", *POLICY_FIELDS)
# A change of these may send a tenant's links or mail somewhere else: it needs an admin key, is logged at
# WARNING, counted, and highlighted wherever the history is shown.
TAKEOVER_FIELDS = frozenset({"reset_url", "sender", "sender_name", "reply_to"})

_CHECKS: dict[str, Callable[[Any], Any]] = {
    "reset_url": check_reset_url,
    "sender": lambda value: check_mailbox(value, "the sender"),
    "sender_name": check_sender_name,
    "reply_to": lambda value: check_mailbox(value, "the reply-to"),
    "product_name": check_product_name,
    "support_contact": check_support_contact,
    "default_locale": check_locale,
    "purposes": lambda value: parse_purposes(f"{p.name}={p.text}" for p in value),
    "templates": check_template_overrides,
    **{name: functools.partial(check_override, name) for name in POLICY_FIELDS},
}


def check_setting(name: str, value: object) -> Any:
    """``value`` as setting ``name`` holds it, checked by the one rule of that setting; ``InvalidInput`` else."""
    if name not in _CHECKS:
        raise InvalidInput(f"{name!r} is not a tenant setting; the settings are {', '.join(SETTING_FIELDS)}")
    return _CHECKS[name](value)


@frozen
class TenantSettings:
    """A tenant's current settings: the fold of its ``TenantConfigured`` facts. None: the deployment's."""

    version: int = 0  # how many configurations made them: 0 for a tenant never configured
    purposes: tuple[Purpose, ...] = ()  # declared; () means the deployment's
    configured_at: datetime | None = None
    reset_url: str | None = None
    sender: str | None = None
    sender_name: str | None = None
    reply_to: str | None = None
    product_name: str | None = None
    support_contact: str | None = None
    default_locale: str | None = None
    templates: tuple[TemplateOverride, ...] = ()  # () means the deployment's templates
    reset_ttl: int | None = None
    reset_cooldown: int | None = None
    reset_hourly_limit: int | None = None
    otp_ttl: int | None = None
    otp_cooldown: int | None = None
    otp_hourly_limit: int | None = None
    otp_digits: int | None = None
    limit_per_address: int | None = None

    def policy_overrides(self) -> dict[str, int]:
        """The rules the tenant set, by name (``domain.policy.POLICY_OVERRIDES``)."""
        return {name: value for name in POLICY_FIELDS if (value := getattr(self, name)) is not None}


_EMPTY = TenantSettings()


@frozen
class TenantState:
    exists: bool
    settings: TenantSettings


def evolve_settings(settings: TenantSettings, event: TenantConfigured) -> TenantSettings:
    """The settings after one configuration: each field it set, each it cleared back to the deployment's."""
    changes: dict[str, Any] = {name: getattr(_EMPTY, name) for name in event.cleared if name in SETTING_FIELDS}
    changes.update({name: value for name in SETTING_FIELDS if (value := getattr(event, name)) is not None})
    return attrs.evolve(settings, version=settings.version + 1, configured_at=event.configured_at, **changes)


def fold_tenant(name: str) -> Callable[[Iterable[object]], TenantState]:
    """The fold of tenant ``name``'s stream: whether it exists (the default always does) and its settings."""
    def fold(events: Iterable[object]) -> TenantState:
        exists, settings = name == DEFAULT_TENANT, TenantSettings()
        for event in events:
            if isinstance(event, TenantCreated):
                exists = True
            elif isinstance(event, TenantConfigured):
                settings = evolve_settings(settings, event)
        return TenantState(exists, settings)

    return fold


def configuration_reason(reason: object) -> str:
    """Why a tenant is configured, trimmed: one short line of plain text without an address."""
    return operator_reason(reason, blank="a configuration needs a reason (--reason): say why, e.g. the ticket",
                           instead="name the ticket or the request instead")


def decide_configure_tenant(
    state: TenantState, name: str, *, changes: Mapping[str, Any], actor: str, reason: str, now: datetime,
) -> list[TenantConfigured]:
    """Set tenant ``name``'s settings in ``changes`` (a value sets, None clears back to the deployment's);
    nothing when they already are so.

    ``InvalidInput`` for a tenant that does not exist, no setting given, a
    value its setting's rule refuses, or a bad actor or reason: nothing is
    recorded then.
    """
    require_utc(now)
    check_tenant_name(name)
    if not state.exists:
        raise InvalidInput(f"no tenant named {name!r}; create it with `authledger tenants create {name}`")
    if not changes:
        raise InvalidInput("name a setting to change, e.g. --product-name TEXT or --purpose NAME=TEXT "
                           "(`authledger tenants configure --help` lists them)")
    if unknown := sorted(set(changes) - set(SETTING_FIELDS)):
        raise InvalidInput(f"{unknown[0]!r} is not a tenant setting; the settings are {', '.join(SETTING_FIELDS)}")
    values = {field: check_setting(field, value) for field, value in changes.items() if value is not None}
    cleared = tuple(field for field in SETTING_FIELDS if field in changes and changes[field] is None)
    event = TenantConfigured(name, now, check_actor(actor), configuration_reason(reason), cleared=cleared, **values)
    after = evolve_settings(state.settings, event)
    unchanged = all(getattr(after, field) == getattr(state.settings, field) for field in SETTING_FIELDS)
    return [] if unchanged else [event]


def allowed_purposes(declared: tuple[Purpose, ...], defaults: tuple[Purpose, ...]) -> tuple[Purpose, ...]:
    """What a tenant allows: what it declared, or the deployment's purposes while it declares none."""
    return declared or defaults
