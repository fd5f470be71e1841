"""SQLAlchemy Core descriptions of the projection tables and the console's sessions (schema.sql is the DDL)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Date, DateTime, Integer, Interval, MetaData, Table, Text, Uuid
from sqlalchemy.dialects.postgresql import JSONB

metadata = MetaData()


def _tz() -> DateTime:
    return DateTime(timezone=True)


email_outbox = Table(
    "email_outbox", metadata,
    Column("message_id", Uuid, primary_key=True),
    Column("flow", Text), Column("template", Text), Column("user_id", Text), Column("request_id", Uuid),
    Column("state", Text), Column("available_at", _tz()), Column("queued_at", _tz()),
    Column("stream_version", Integer), Column("lease_owner", Text), Column("lease_token", Uuid),
    Column("lease_expires_at", _tz()), Column("attempt_count", Integer),
    Column("provider_message_id", Text), Column("last_error", Text), Column("skip_reason", Text),
    Column("finished_at", _tz()), Column("unknown_outcomes", Integer),
)

reset_tokens = Table(
    "reset_tokens", metadata,
    Column("request_id", Uuid, primary_key=True),
    Column("token_hash", Text), Column("user_id", Text), Column("key_id", Text),
    Column("message_id", Uuid), Column("expires_at", _tz()), Column("status", Text),
)

# Catch-up projections (issue 6): written by the catch-up runner, each batch
# in one transaction with its row in projection_checkpoints.
delivery_messages = Table(
    "delivery_messages", metadata,
    Column("message_id", Uuid, primary_key=True),
    Column("flow", Text), Column("template", Text), Column("day", Date), Column("queued_at", _tz()),
    Column("outcome", Text), Column("attempts", Integer), Column("finished_at", _tz()),
    Column("time_to_accept", Interval),
)

audit_index = Table(
    "audit_index", metadata,
    Column("kind", Text, primary_key=True), Column("value", Text, primary_key=True),
    Column("global_position", BigInteger, primary_key=True),
)

projection_checkpoints = Table(
    "projection_checkpoints", metadata,
    Column("projection", Text, primary_key=True),
    Column("transaction_id", Text), Column("global_position", BigInteger),
    Column("events_applied", BigInteger), Column("updated_at", _tz()),
)

otp_challenges = Table(
    "otp_challenges", metadata,
    Column("challenge_id", Uuid, primary_key=True),
    Column("user_id", Text), Column("status", Text), Column("expires_at", _tz()), Column("failures", Integer),
    Column("message_id", Uuid), Column("key_id", Text), Column("purpose", Text),
)

receipts = Table(
    "receipts", metadata,
    Column("receipt_id", Uuid, primary_key=True),
    Column("flow", Text), Column("client", Text), Column("user_id", Text), Column("idempotency_key", Text),
    Column("request_id", Uuid), Column("message_id", Uuid), Column("created_at", _tz()),
)

stream_snapshots = Table(
    "stream_snapshots", metadata,
    Column("stream_id", Text, primary_key=True),
    Column("version", Integer), Column("state", JSONB),
)

stream_requests = Table(
    "stream_requests", metadata,
    Column("request_id", Uuid, primary_key=True),
    Column("stream_id", Text), Column("recipient_at", BigInteger), Column("request", JSONB),
)

api_keys = Table(
    "api_keys", metadata,
    Column("key_id", Text, primary_key=True),
    Column("key_hash", Text), Column("client", Text), Column("tenant", Text), Column("scopes", Text),
    Column("status", Text), Column("created_at", _tz()), Column("revoked_at", _tz()),
)

webhook_endpoints = Table(
    "webhook_endpoints", metadata,
    Column("endpoint_id", Text, primary_key=True),
    Column("tenant", Text), Column("url", Text), Column("event_types", Text), Column("status", Text),
    Column("secret_id", Text), Column("master_key_id", Text), Column("sealed_secret", Text),
    Column("created_at", _tz()), Column("rotated_at", _tz()),
    Column("previous_secret_id", Text), Column("previous_master_key_id", Text),
    Column("previous_sealed_secret", Text), Column("previous_until", _tz()), Column("removed_at", _tz()),
)

tenants = Table(
    "tenants", metadata,
    Column("name", Text, primary_key=True), Column("created_at", _tz()),
)

tenant_settings = Table(
    "tenant_settings", metadata,
    Column("tenant", Text, primary_key=True),
    Column("version", Integer), Column("purposes", Text), Column("configured_at", _tz()), Column("overrides", Text),
    Column("takeover_changes", Integer),
)

address_index = Table(
    "address_index", metadata,
    Column("user_id", Text, primary_key=True),
    Column("tenant", Text), Column("hashes", Text),
)

suppressions = Table(
    "suppressions", metadata,
    Column("user_id", Text, primary_key=True),
    Column("tenant", Text), Column("hashes", Text), Column("reason", Text), Column("message_id", Uuid),
    Column("suppressed_at", _tz()),
)

console_sessions = Table(
    "console_sessions", metadata,
    Column("cookie_hash", Text, primary_key=True),
    Column("key_hash", Text), Column("csrf", Text), Column("created_at", _tz()), Column("last_seen", _tz()),
)
