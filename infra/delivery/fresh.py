"""The fresh read before a send: is the email still wanted, and what does it say?

The email's own events never hold the token or the code. Right before its
send, the worker loads the request's stream, asks the domain whether the
email is still wanted, derives the secret again from the configured key and
renders it. An email whose user was erased (``authledger privacy forget``)
is skipped with reason "erased": the fresh state then holds ``[erased]`` for
the address and for the request's nonce, and nothing is rendered for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from email.headerregistry import Address
from functools import partial
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from attrs import frozen
from sqlalchemy import Connection

from domain import otp, otp_events, otp_state, reset, reset_events, reset_state, templates
from domain.tenants import UNDECLARED_CODE_NAME, TenantSettings, tenant_of
from domain.tokens import SecretUnavailable
from domain.webhooks import WEBHOOK_FLOW
from infra.delivery.leases import Claim
from infra.delivery.providers import OutboundEmail, sender_address
from infra.delivery.webhook_calls import Planned, WebhookCall, plan_calls
from infra.eventlog.personal_data import ERASED
from infra.projector.snapshots import Lookups
from infra.services.tenants import display_texts, settings_of_tenants
from infra.services.unit_of_work import ServiceContext, load_states
from projections.outbox import OutboxRow


@frozen
class Prepared:
    """What to send, or why not to."""

    email: OutboundEmail | None
    skip_reason: str | None
    key_id: str | None = None
    useful_until: datetime | None = None  # when the link or code expires: no retry is worth it after
    settings_version: int | None = None  # the tenant settings version it was rendered with (0: none configured)
    webhook: WebhookCall | None = None  # a webhook delivery's signed call, instead of an email
    error: str | None = None  # why it cannot be sent now, though still wanted: a failed attempt, retried

    @property
    def sendable(self) -> bool:
        return self.email is not None or self.webhook is not None


@frozen
class Branding:
    """How one tenant's emails look and where they point, built from its settings over the deployment's.

    Read fresh with the request, like the code names: an email is rendered
    with the settings of the moment it is sent, and names their version.
    ``default_locale`` and the per-locale ``overrides`` are handed to the
    rendering whole: it picks each email's language (the request's, the
    tenant's default, English) among the shipped texts and these.
    """

    version: int
    sender: str  # the From line
    reply_to: str | None
    reset_url: str
    brand: templates.Brand
    default_locale: str | None
    overrides: Mapping[str, Mapping[str, str]]  # locale -> template file -> text
    code_names: Mapping[str, str]  # purpose name -> display text


def branding(ctx: ServiceContext, settings: TenantSettings, *, sender: str) -> Branding:
    """A tenant's branding: each setting it made, else the deployment's (``sender`` is the worker's From)."""
    from_line = sender
    if settings.sender is not None or settings.sender_name is not None:
        deployment = sender_address(sender)
        from_line = str(Address(settings.sender_name if settings.sender_name is not None else deployment.display_name,
                                addr_spec=settings.sender or deployment.addr_spec))
    overrides: dict[str, dict[str, str]] = {}
    for override in settings.templates:
        overrides.setdefault(override.locale, {})[override.file] = override.text
    brand = templates.Brand(settings.product_name or ctx.product_name,
                            settings.support_contact or ctx.support_contact or "")
    return Branding(settings.version, from_line, settings.reply_to, settings.reset_url or ctx.reset_url, brand,
                    settings.default_locale, overrides, display_texts(settings, ctx.otp_purposes))


def prepare(ctx: ServiceContext, claim: Claim, *, sender: str, connection: Connection | None = None) -> Prepared:
    """What to send for one claimed message, decided on its request's state read now."""
    [prepared] = prepare_all(ctx, [claim], sender=sender, connection=connection)
    return prepared


def prepare_all(
    ctx: ServiceContext, claims: Sequence[Claim], *, sender: str, connection: Connection | None = None
) -> list[Prepared]:
    """``prepare`` for messages about to be sent together, in claim order: their requests read in one statement.

    Webhook deliveries in the group are read by ``webhook_calls.plan_calls``.
    """
    hooks = [claim for claim in claims if claim.row.flow == WEBHOOK_FLOW]
    if not hooks:
        return _prepare_emails(ctx, claims, sender=sender, connection=connection)
    emails = [claim for claim in claims if claim.row.flow != WEBHOOK_FLOW]
    if connection is None:
        with ctx.engine.connect() as fresh:
            planned = iter(plan_calls(fresh, hooks, now=ctx.clock.now()))
    else:
        planned = iter(plan_calls(connection, hooks, now=ctx.clock.now()))
    prepared = iter(_prepare_emails(ctx, emails, sender=sender, connection=connection) if emails else [])
    return [_webhook_prepared(next(planned)) if claim.row.flow == WEBHOOK_FLOW else next(prepared)
            for claim in claims]


def _webhook_prepared(planned: Planned) -> Prepared:
    return Prepared(None, planned.skip_reason, None, planned.useful_until, webhook=planned.call, error=planned.error)


def _prepare_emails(
    ctx: ServiceContext, claims: Sequence[Claim], *, sender: str, connection: Connection | None = None
) -> list[Prepared]:
    now = ctx.clock.now()
    requests = {claim.row.message_id: _request_stream(claim.row) for claim in claims}
    # Each request's stream from its snapshot, as a decision reads it: the same cost on a user's first day
    # and their thousandth.
    folds = {stream: fold for stream, fold in requests.values() if stream and fold}
    # Each message's request, found by id if it has left its stream's live part.
    asked: dict[str, list[UUID]] = {}
    for claim in claims:
        stream, _ = requests[claim.row.message_id]
        if stream:
            asked.setdefault(stream, []).append(claim.row.request_id)
    states = load_states(ctx, folds, connection,
                         {stream: Lookups(request_ids=tuple(ids)) for stream, ids in asked.items()})
    brandings = {tenant: branding(ctx, settings, sender=sender)
                 for tenant, settings in _tenant_settings(ctx, claims, connection).items()}
    prepared = []
    for claim in claims:
        stream, _ = requests[claim.row.message_id]
        prepared.append(_decide(ctx, claim, states[stream] if stream else None, now=now,
                                brand=brandings[tenant_of(claim.row.user_id)]))
    return prepared


def _tenant_settings(ctx: ServiceContext, claims: Sequence[Claim], connection: Connection | None
                     ) -> dict[str, TenantSettings]:
    """The settings of each email's tenant now, read fresh like its request."""
    tenants = {tenant_of(claim.row.user_id) for claim in claims}
    if connection is not None:
        return settings_of_tenants(connection, tenants)
    with ctx.engine.connect() as fresh:
        return settings_of_tenants(fresh, tenants)


def _request_stream(row: OutboxRow) -> tuple[str | None, Callable[[Iterable[object]], Any] | None]:
    """The stream holding the request of this message, and its fold; (None, None) for an unknown flow."""
    if row.flow == "reset":
        return reset_events.reset_stream(row.user_id), reset_state.fold_reset
    if row.flow == "otp":
        return otp_events.otp_stream(row.user_id), otp_state.fold_otp
    return None, None


def _decide(ctx: ServiceContext, claim: Claim, state: Any, *, now: datetime, brand: Branding) -> Prepared:
    try:
        return _render(ctx, claim, state, now=now, brand=brand)
    except SecretUnavailable:
        # The request's nonce reads [erased]: its user was forgotten, and no one can derive its secret now.
        return Prepared(None, "erased")


def _link(reset_url: str, token: str) -> str:
    """The reset page with the token added to its query (a page may have one of its own)."""
    return f"{reset_url}{'&' if '?' in reset_url else '?'}{urlencode({'token': token})}"


def _render(ctx: ServiceContext, claim: Claim, state: Any, *, now: datetime, brand: Branding) -> Prepared:
    """The email for one message, in the best of its request's language, the tenant's default and English
    (``templates.localized``), from ``ctx.email_templates`` with the tenant's own texts over them."""
    row = claim.row
    fill: Callable[[templates.EmailTemplate], templates.Rendered]
    if row.flow == "reset":
        reason = reset.reset_delivery_verdict(state, row.request_id, now=now, template=row.template)
        if reason:
            return Prepared(None, reason)
        request = state.requests[row.request_id]
        if request.recipient == ERASED:
            return Prepared(None, "erased")
        if row.template == reset_events.PASSWORD_CHANGED:
            completed_at = request.completed_at
            assert completed_at is not None
            fill = partial(templates.password_changed, changed_at=completed_at, brand=brand.brand)
            key_id = None
            useful_until = completed_at + ctx.delivery_policy.notice_useful_for
        else:
            token = reset.reset_token_for(request, ctx.keys)
            fill = partial(templates.reset_link, link=_link(brand.reset_url, token), expires_at=request.expires_at,
                           brand=brand.brand)
            key_id = request.key_id
            useful_until = request.expires_at
        # The notice of a completed reset speaks the language of the request it completed.
        recipient, requested_locale = request.recipient, request.locale
    elif row.flow == "otp":
        reason = otp.otp_delivery_verdict(state, row.request_id, now=now)
        if reason:
            return Prepared(None, reason)
        challenge = state.challenges[row.request_id]
        if challenge.recipient == ERASED:
            return Prepared(None, "erased")
        code = otp.otp_code_for(challenge, ctx.keys)
        # The words the tenant declared for the purpose, never the purpose a caller sent; a purpose withdrawn
        # since the request still gets its code, under a neutral name.
        fill = partial(templates.otp_code, code=code, expires_at=challenge.expires_at,
                       code_name=brand.code_names.get(challenge.purpose, UNDECLARED_CODE_NAME), brand=brand.brand)
        recipient, key_id, useful_until = challenge.recipient, challenge.key_id, challenge.expires_at
        requested_locale = challenge.locale
    else:
        return Prepared(None, f"unknown_flow:{row.flow}")
    locale, template = templates.localized(
        ctx.email_templates, row.template, requested_locale=requested_locale,
        tenant_default_locale=brand.default_locale, template_overrides=brand.overrides)
    content = fill(template)
    email = OutboundEmail(row.message_id, brand.sender, recipient, content.subject, content.text, content.html,
                          reply_to=brand.reply_to, locale=locale)
    return Prepared(email, None, key_id, useful_until, brand.version)
