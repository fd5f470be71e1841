"""Inline projections: folded into their tables in the same transaction as the append.

Each projection is a pure fold from ``projections/`` plus the table it lives
in, held by the same ``KeyedApplier`` that rebuilds, verifies and replays it.
``apply_inline`` folds the events an append wrote into the rows they touch
(read ``FOR UPDATE``), so a read model can never disagree with the log it
came from. ``ask_inline`` asks for those rows ahead, before the append, so
that in a pipelined transaction they come back with the append's own answer.
Only the unit of work (``infra.services.unit_of_work``) calls them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection

from domain import email, otp_events, request_rules, reset_events, suppression, webhooks
from domain.log import RecordedEvent
from infra.db import tables
from infra.projector.appliers import Asked, KeyedApplier
from infra.projector.snapshots import SnapshotApplier
from projections.address_index import AddressIndexRow, address_index_key, evolve_address_index
from projections.api_keys import ApiKeyRow, api_key_key, evolve_api_key
from projections.otp_challenges import OtpChallengeRow, evolve_otp_challenge, otp_challenge_key
from projections.outbox import OutboxRow, evolve_outbox
from projections.receipts import ReceiptRow, evolve_receipt, receipt_key
from projections.suppressions import SuppressionRow, evolve_suppression, suppression_key
from projections.reset_tokens import ResetTokenRow, evolve_reset_token, reset_token_key
from projections.webhook_endpoints import WebhookEndpointRow, evolve_webhook_endpoint, webhook_endpoint_key
from projections.tenants import (
    TenantRow,
    TenantSettingsRow,
    evolve_tenant,
    evolve_tenant_settings,
    tenant_key,
    tenant_settings_key,
)

EMAIL_EVENTS = (
    email.EmailQueued, email.LeaseClaimed, email.LeaseExpired, email.LeaseReleased, email.SendAttemptFailed,
    email.ProviderAccepted, email.DeliverySkipped, email.DeliveryAbandoned,
    email.DeliveryRedriven, email.DeliveryOutcomeUnknown,
    # What the provider told later, and the suppression it caused: on the email's stream, so they count in
    # the row's stream_version, which the worker's fenced appends go by.
    email.ProviderDelivered, email.ProviderBounced, email.ProviderComplained, suppression.AddressSuppressed,
    webhooks.WebhookQueued,
)


def _email_key(event: object) -> Any:
    return event.message_id if isinstance(event, EMAIL_EVENTS) else None


# ``starts``: the events that make a row whole (a new message, request or challenge id; every receipt
# names its whole answer), so that folding them reads nothing first (KeyedApplier).
OUTBOX = KeyedApplier(
    tables.email_outbox, OutboxRow, "message_id", _email_key, evolve_outbox, lock=True,
    starts=(email.EmailQueued, webhooks.WebhookQueued),
)
RESET_TOKENS = KeyedApplier(
    tables.reset_tokens, ResetTokenRow, "request_id", reset_token_key, evolve_reset_token, lock=True,
    starts=(reset_events.ResetRequested,),
)
OTP_CHALLENGES = KeyedApplier(
    tables.otp_challenges, OtpChallengeRow, "challenge_id", otp_challenge_key, evolve_otp_challenge, lock=True,
    starts=(otp_events.OtpChallengeIssued,),
)
RECEIPTS = KeyedApplier(
    tables.receipts, ReceiptRow, "receipt_id", receipt_key, evolve_receipt, lock=True,
    starts=(reset_events.ResetRequested, otp_events.OtpChallengeIssued, request_rules.IdempotencyKeyBound),
)
API_KEYS = KeyedApplier(tables.api_keys, ApiKeyRow, "key_id", api_key_key, evolve_api_key, lock=True)
TENANTS = KeyedApplier(tables.tenants, TenantRow, "name", tenant_key, evolve_tenant, lock=True)
TENANT_SETTINGS = KeyedApplier(
    tables.tenant_settings, TenantSettingsRow, "tenant", tenant_settings_key, evolve_tenant_settings, lock=True
)
ADDRESS_INDEX = KeyedApplier(
    tables.address_index, AddressIndexRow, "user_id", address_index_key, evolve_address_index, lock=True,
    shared_keys=True,  # one row per user, written by their reset and OTP streams, whose writers do not take turns
)
SUPPRESSIONS = KeyedApplier(
    tables.suppressions, SuppressionRow, "user_id", suppression_key, evolve_suppression, lock=True,
    shared_keys=True,  # one row per user, written by the streams of each of their emails, which do not take turns
)
WEBHOOK_ENDPOINTS = KeyedApplier(
    tables.webhook_endpoints, WebhookEndpointRow, "endpoint_id", webhook_endpoint_key, evolve_webhook_endpoint,
    lock=True, starts=(webhooks.WebhookEndpointAdded,),
)
# Folded last: a decision's snapshot is written after the rows it decided on.
SNAPSHOTS = SnapshotApplier()
INLINE: list[KeyedApplier | SnapshotApplier] = [
    OUTBOX, RESET_TOKENS, OTP_CHALLENGES, RECEIPTS, API_KEYS, TENANTS, TENANT_SETTINGS, ADDRESS_INDEX, SUPPRESSIONS,
    WEBHOOK_ENDPOINTS, SNAPSHOTS,
]


def ask_inline(
    connection: Connection, events: Sequence[object], loaded: Mapping[str, dict[Any, Any]] | None = None,
) -> dict[str, Asked]:
    """Ask ahead, by projection name, for the rows the events about to be appended will fold."""
    asked = {}
    for projection in INLINE:
        if isinstance(projection, KeyedApplier):
            if (rows := projection.ask(connection, events, (loaded or {}).get(projection.name))) is not None:
                asked[projection.name] = rows
    return asked


def apply_inline(
    connection: Connection, recorded: Sequence[RecordedEvent], loaded: Mapping[str, dict[Any, Any]] | None = None,
    asked: Mapping[str, Asked] | None = None,
) -> None:
    """Fold freshly appended events into every inline projection they touch.

    ``loaded`` holds, by projection name, rows the caller already read and
    locked; ``asked``, rows ``ask_inline`` asked for; see ``KeyedApplier.apply``.
    """
    for projection in INLINE:
        rows = (loaded or {}).get(projection.name)
        if isinstance(projection, KeyedApplier):
            projection.apply(connection, recorded, loaded=rows, asked=(asked or {}).get(projection.name))
        else:
            projection.apply(connection, recorded, loaded=rows)
