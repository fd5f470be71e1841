"""The delivery hot path's writes to the log: a claim, and a group of fenced outcomes, one statement each.

Both append to ``email:<message_id>`` streams (``webhook:<delivery_id>`` for a
row of flow "webhook": a webhook delivery, leased the same way) and fold what they appended
into ``email_outbox`` in the same statement. Only the unit of work calls them
(``infra.services.unit_of_work.claim_leases`` and ``record_fenced``), as it
alone calls the store's append: tests/unit/test_write_path.py names them.

The claim's events are built in SQL, because which rows it claims is only
known there. Their payloads start from a template the codec encoded (so the
tag, schema version and every timestamp's text are the codec's own); SQL
only fills in each row's message id, lease token, previous owner and attempt
number, whose JSON text is the same either way. tests/delivery/
test_set_based_claim.py decodes what it writes and compares it with the
Python path's events and fold.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import Connection, Row, text

from domain.email import LeaseClaimed, LeaseExpired
from infra.eventlog.codec import default_codec
from infra.eventlog.ids import time_ordered_id

# The tenant of an outbox row, from its scoped user id ("<tenant> <user>",
# domain.tenants; the default tenant's ids have no space): '' for the default
# tenant. Word for word the expression of schema.sql's email_outbox_due_by_tenant,
# so that the planner finds the index.
TENANT_OF_ROW = "(CASE WHEN strpos(user_id, ' ') > 0 THEN split_part(user_id, ' ', 1) ELSE '' END)"

# Due rows are claimed round-robin by tenant, so that one tenant's backlog of
# thousands does not hold another's one email back by the whole backlog:
# the tenants with unfinished mail are found by a walk down the index (one
# probe per tenant, however long the backlog), each gets a share of the
# claim, taken oldest first from its own rows; a share that a tenant cannot
# fill goes to the oldest due rows of the others. Claim order is each
# tenant's first, then each one's second, and so on; with one tenant it is
# oldest first, as before. Within a turn the tenants come in random order:
# the worker often claims a few rows at a time (as places in its window
# free up), fewer than there are tenants with due mail, and ordering a turn
# by age would then give every place to the tenant with the old backlog;
# at random each tenant has an even chance of each place. The cost is a
# probe per tenant with unfinished mail plus the rows claimed, never the
# backlog's length.
#
# Rows are locked with SKIP LOCKED so that workers claim side by side (a
# share may lock a few rows more than the claim takes, until it commits);
# each is numbered in claim order and paired with one of the caller's new
# lease tokens. A leased row here is one whose lease ran out: its lease
# expires (LeaseExpired) before the new claim (LeaseClaimed), as in
# domain.delivery.claim_events. The row is then set to what
# projections.outbox.evolve_outbox makes of those events. Every row is
# locked, so its stream_version is its stream's; the unique
# (stream_id, stream_version) key would refuse a second writer regardless.
CLAIM = text(f"""
    WITH RECURSIVE tenants(tenant) AS (
        (SELECT {TENANT_OF_ROW} FROM email_outbox WHERE state IN ('pending', 'leased')
          ORDER BY 1 LIMIT 1)
        UNION ALL
        SELECT (SELECT {TENANT_OF_ROW} FROM email_outbox
                 WHERE state IN ('pending', 'leased') AND {TENANT_OF_ROW} > t.tenant
                 ORDER BY 1 LIMIT 1)
          FROM tenants t WHERE t.tenant IS NOT NULL
    ), share AS (
        SELECT CAST(ceil(CAST(:limit AS numeric) / greatest(count(*), 1)) AS integer) AS n
          FROM tenants WHERE tenant IS NOT NULL
    ), fair AS MATERIALIZED (
        SELECT mine.*
          FROM tenants t
         CROSS JOIN LATERAL (
               SELECT * FROM email_outbox
                WHERE state IN ('pending', 'leased') AND available_at <= :now AND {TENANT_OF_ROW} = t.tenant
                ORDER BY available_at
                LIMIT (SELECT n FROM share)
                  FOR UPDATE SKIP LOCKED
               ) AS mine
         WHERE t.tenant IS NOT NULL
    ), rest AS MATERIALIZED (
        SELECT * FROM email_outbox
         WHERE state IN ('pending', 'leased') AND available_at <= :now
           AND message_id NOT IN (SELECT message_id FROM fair)
         ORDER BY available_at
         LIMIT (SELECT greatest(0, :limit - count(*)) FROM fair)
           FOR UPDATE SKIP LOCKED
    ), due AS MATERIALIZED (
        SELECT *, row_number() OVER (ORDER BY turn, random()) AS n
          FROM (SELECT *, row_number() OVER (PARTITION BY {TENANT_OF_ROW} ORDER BY available_at, message_id) AS turn
                  FROM fair
                UNION ALL
                SELECT *, :limit + row_number() OVER (ORDER BY available_at, message_id) FROM rest) AS both_kinds
         ORDER BY n
         LIMIT :limit
    ), claimed AS MATERIALIZED (
        SELECT d.*, t.token,
               (d.state = 'leased' AND d.lease_owner IS NOT NULL AND d.lease_token IS NOT NULL) AS ran_out
          FROM due d
          JOIN unnest(CAST(:tokens AS uuid[])) WITH ORDINALITY AS t(token, k) ON t.k = d.n
    ), appended AS (
        INSERT INTO events (stream_id, stream_version, event_id, event_type, schema_version, payload, metadata)
        SELECT CASE WHEN c.flow = 'webhook' THEN 'webhook:' ELSE 'email:' END || c.message_id::text,
               c.stream_version + e.offset_in_stream,
               (CAST(:event_ids AS uuid[]))[CAST((c.n - 1) * 2 + e.offset_in_stream AS integer)],
               e.event_type, e.schema_version, e.payload, CAST(:metadata AS jsonb)
          FROM claimed c
         CROSS JOIN LATERAL (
               SELECT 1, CAST(:expired_tag AS text), CAST(:expired_version AS integer),
                      CAST(:expired AS jsonb) || jsonb_build_object(
                          'message_id', c.message_id::text, 'lease_owner', c.lease_owner,
                          'lease_token', c.lease_token::text)
                WHERE c.ran_out
               UNION ALL
               SELECT CASE WHEN c.ran_out THEN 2 ELSE 1 END, CAST(:claimed_tag AS text),
                      CAST(:claimed_version AS integer),
                      CAST(:claimed AS jsonb) || jsonb_build_object(
                          'message_id', c.message_id::text, 'lease_token', c.token::text,
                          'attempt', c.attempt_count + 1)
               ) AS e(offset_in_stream, event_type, schema_version, payload)
         ORDER BY c.n, e.offset_in_stream  -- positions follow claim order, as the Python append's did
        RETURNING 1
    )
    UPDATE email_outbox o
       SET state = 'leased', lease_owner = CAST(:owner AS text), lease_token = c.token,
           lease_expires_at = :lease_expires_at, available_at = :lease_expires_at,
           attempt_count = c.attempt_count + 1,
           unknown_outcomes = c.unknown_outcomes + CASE WHEN c.ran_out THEN 1 ELSE 0 END,
           stream_version = c.stream_version + CASE WHEN c.ran_out THEN 2 ELSE 1 END
      FROM claimed c
     WHERE o.message_id = c.message_id
    RETURNING c.n AS claim_order, o.*
""")

# Fenced by lease token: a row is updated, and its events appended, only
# while it is still leased under the token the outcome was reached with and
# at the version the caller folded from. The UPDATE locks the row (waiting
# for a concurrent claimer, then checking the row it committed), so a lease
# taken over in the meantime records nothing.
RECORD_FENCED = text("""
    WITH recorded AS (
        UPDATE email_outbox o
           SET state = n.state, available_at = n.available_at, stream_version = n.stream_version,
               lease_owner = n.lease_owner, lease_token = n.lease_token, lease_expires_at = n.lease_expires_at,
               attempt_count = n.attempt_count, provider_message_id = n.provider_message_id,
               last_error = n.last_error, skip_reason = n.skip_reason, finished_at = n.finished_at,
               unknown_outcomes = n.unknown_outcomes
          FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS n(
                   message_id uuid, held_token uuid, held_version integer, state text, available_at timestamptz,
                   stream_version integer, lease_owner text, lease_token uuid, lease_expires_at timestamptz,
                   attempt_count integer, provider_message_id text, last_error text, skip_reason text,
                   finished_at timestamptz, unknown_outcomes integer)
         WHERE o.message_id = n.message_id AND o.state = 'leased'
           AND o.lease_token = n.held_token AND o.stream_version = n.held_version
        RETURNING o.message_id
    ), appended AS (
        INSERT INTO events (stream_id, stream_version, event_id, event_type, schema_version, payload, metadata)
        SELECT e.stream_id, e.stream_version, e.event_id, e.event_type, e.schema_version, e.payload,
               CAST(:metadata AS jsonb)
          FROM jsonb_to_recordset(CAST(:events AS jsonb)) AS e(
                   message_id uuid, stream_id text, stream_version integer, event_id uuid, event_type text,
                   schema_version integer, payload jsonb, n integer)
         WHERE e.message_id IN (SELECT message_id FROM recorded)
         ORDER BY e.n
        RETURNING 1
    )
    SELECT message_id FROM recorded
""")

_NO_ID = UUID(int=0)  # a template's placeholder: SQL replaces it per row


def _encoded_json(metadata: Mapping[str, Any]) -> str:
    return json.dumps(dict(metadata), separators=(",", ":"))


def claim_due_leases(
    connection: Connection, *, owner: str, limit: int, now: datetime, lease_expires_at: datetime,
    tokens: Sequence[UUID], metadata: Mapping[str, Any],
) -> list[Row[Any]]:
    """Claim up to ``limit`` due rows in one statement; the claimed ``email_outbox`` rows, in claim order.

    ``tokens`` holds one new lease token per row that may be claimed. Only
    the unit of work calls this (one write path).
    """
    codec = default_codec()
    claimed_tag, claimed_version, claimed = codec.encode(
        LeaseClaimed(_NO_ID, owner, _NO_ID, claimed_at=now, lease_expires_at=lease_expires_at, attempt=0))
    expired_tag, expired_version, expired = codec.encode(LeaseExpired(_NO_ID, "", _NO_ID, expired_at=now))
    rows = connection.execute(CLAIM, {
        "now": now, "limit": limit, "tokens": list(tokens[:limit]), "owner": owner,
        "event_ids": [time_ordered_id() for _ in range(2 * limit)],  # at most two events per row: expired, claimed
        "lease_expires_at": lease_expires_at, "metadata": _encoded_json(metadata),
        "claimed_tag": claimed_tag, "claimed_version": claimed_version, "claimed": json.dumps(claimed),
        "expired_tag": expired_tag, "expired_version": expired_version, "expired": json.dumps(expired),
    }).all()
    return sorted(rows, key=lambda row: row.claim_order)


def append_fenced(
    connection: Connection, rows: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]],
    metadata: Mapping[str, Any],
) -> set[UUID]:
    """Write each message's new outbox row and events while its lease holds; the ids written.

    ``rows`` are the folded rows, each with ``held_token`` and
    ``held_version`` (the fence); ``events`` carry ``message_id``,
    ``stream_id``, ``stream_version``, ``event_id``, ``event_type``,
    ``schema_version`` and ``payload`` as the codec encoded them.
    """
    numbered = [{**event, "n": n} for n, event in enumerate(events)]  # positions follow the caller's order
    params = {"rows": json.dumps(rows, default=str), "events": json.dumps(numbered, default=str),
              "metadata": _encoded_json(metadata)}
    return set(connection.execute(RECORD_FENCED, params).scalars())
