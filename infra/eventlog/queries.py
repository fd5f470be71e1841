"""Named questions other capabilities ask of the ``events`` table, beside the stores and the whole-log reader.

Only the event log (and the sealer) writes SQL against ``events``: a change
to the table or its indexes is then checked here, in one folder, rather than
hunted through status, metrics and review. Each function is one statement on
the caller's connection and returns plain rows; the caller keeps its meaning.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any
from uuid import UUID

from sqlalchemy import Connection, Row, TextClause, text

from domain.log import Checkpoint
from infra.db.pipeline import execute_read

LAG = text("""
    SELECT count(*) AS events, extract(epoch FROM now() - min(recorded_at)) AS seconds
      FROM events WHERE (transaction_id, global_position) > (CAST(:tx AS text)::xid8, :pos)
""")
HORIZON = text("""
    SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS horizon,
           pg_snapshot_xmax(pg_current_snapshot())::text AS next_xid,
           (SELECT max(transaction_id) FROM events)::text AS highest_logged,
           (SELECT count(*) FROM events
             WHERE transaction_id >= pg_snapshot_xmin(pg_current_snapshot())) AS events_held_back
""")
HORIZON_HEAD = text("""
    SELECT transaction_id::text AS tx, global_position FROM events
     WHERE transaction_id < pg_snapshot_xmin(pg_current_snapshot())
     ORDER BY transaction_id DESC, global_position DESC LIMIT 1
""")
# The delivery events past the checkpoint, with what their latencies need:
# the queue time of the message (its stream's first event) and, for an
# acceptance, when the lease it was sent under was claimed; and the scoped
# user id the message was queued for, which names its tenant (metrics are
# per tenant).
DELIVERY_EVENTS = text("""
    SELECT e.transaction_id::text AS tx, e.global_position, e.event_type,
           (e.payload->>'attempt')::int AS attempt,
           coalesce(e.payload->>'claimed_at', e.payload->>'accepted_at')::timestamptz AS at,
           q.queued_at, q.user_id, c.claimed_at
      FROM events e
      LEFT JOIN LATERAL (
            SELECT (x.payload->>'available_at')::timestamptz AS queued_at, x.payload->>'user_id' AS user_id
              FROM events x
             WHERE x.stream_id = e.stream_id AND x.stream_version = 1
            ) q ON e.event_type IN ('EmailQueued', 'ProviderAccepted', 'DeliverySkipped', 'DeliveryAbandoned',
                                    'DeliveryRedriven', 'SendAttemptFailed', 'LeaseClaimed', 'LeaseExpired',
                                    'DeliveryOutcomeUnknown')
      LEFT JOIN LATERAL (
            SELECT (x.payload->>'claimed_at')::timestamptz AS claimed_at FROM events x
             WHERE x.stream_id = e.stream_id AND x.event_type = 'LeaseClaimed'
               AND x.payload->>'lease_token' = e.payload->>'lease_token'
            ) c ON e.event_type = 'ProviderAccepted'
     WHERE e.transaction_id < pg_snapshot_xmin(pg_current_snapshot())
       AND (e.transaction_id, e.global_position) > (CAST(:tx AS text)::xid8, :pos)
     ORDER BY e.transaction_id, e.global_position
     LIMIT :limit
""")


def lag_after(connection: Connection, checkpoint: Checkpoint) -> Row[Any]:
    """How many events follow ``checkpoint`` (``events``), and the age in seconds of the oldest (``seconds``)."""
    return connection.execute(LAG, {"tx": str(checkpoint.transaction_id), "pos": checkpoint.global_position}).one()


def horizon_state(connection: Connection) -> Row[Any]:
    """The horizon, the next transaction id, the highest one in the log, and how many events wait above it."""
    return connection.execute(HORIZON).one()


def horizon_head(connection: Connection) -> Row[Any] | None:
    """The (``tx``, ``global_position``) of the last event below the horizon; None for an empty log."""
    return connection.execute(HORIZON_HEAD).first()


def delivery_events_after(connection: Connection, tx: str, position: int, limit: int) -> Sequence[Row[Any]]:
    """The next ``limit`` events below the horizon after (tx, position), with their delivery latencies' inputs."""
    return connection.execute(DELIVERY_EVENTS, {"tx": tx, "pos": position, "limit": limit}).all()


# Personal fields of the events at these positions, as stored (sealed): the
# snapshots of reset and OTP streams name the events that carry each address and nonce.
PERSONAL_FIELDS_AT = text("""
    SELECT global_position, event_type, payload->>'user_id' AS user_id,
           ARRAY(SELECT payload->>f FROM unnest(CAST(:fields AS text[])) WITH ORDINALITY AS u(f, n) ORDER BY n)
               AS field_values
      FROM events WHERE global_position = ANY(CAST(:positions AS bigint[]))
""")


def personal_fields_at(connection: Connection, positions: Sequence[int], fields: Sequence[str]) -> Sequence[Row[Any]]:
    """(global_position, event_type, user_id, field_values) of the events at ``positions``: ``fields`` in
    order, sealed."""
    return connection.execute(PERSONAL_FIELDS_AT, {"positions": list(positions), "fields": list(fields)}).all()


# What a decision reads of its stream, in one round trip (and what delivery's
# fresh read reads of several): each stream's last version, its snapshot (if
# any), its user's data keys oldest first (the first is the one a write seals
# under, as subject_keys.SELECT_BY_USER orders them), and for each request the
# snapshot names the sealed personal fields of the event that carries them
# (one row per request; one row when there is no snapshot). A decision then
# needs the events after the snapshot only when the last version says there
# are some. With them come the stream's counts of refused and repeated calls
# not yet written (``request_counts``), which its next append writes first:
# read on their own, they cost the first request after a flood a round trip.
# The state, the keys and the counts come on one row of each stream only (the
# ``first`` one), the state as text to be parsed once: on every row a user
# with 60 recent requests was sent, and parsed, 60 copies of a state that
# holds all 60 (bench/one_user.py, the peer beside a new user). The keys
# were once joined to each sealed field, by the key id in its envelope: a
# row per request and field, and a pattern match on each.
_DECISION_READ = """
    SELECT w.stream_id,
           (SELECT coalesce(max(x.stream_version), 0) FROM events x WHERE x.stream_id = w.stream_id) AS last_version,
           s.version,
           row_number() OVER (PARTITION BY w.stream_id) = 1 AS first,
           CASE WHEN row_number() OVER (PARTITION BY w.stream_id) = 1 THEN CAST(s.state AS text) END AS state_json,
           CASE WHEN row_number() OVER (PARTITION BY w.stream_id) = 1 THEN uk.key_ids END AS key_ids,
           CASE WHEN row_number() OVER (PARTITION BY w.stream_id) = 1 THEN uk.master_key_ids END AS master_key_ids,
           CASE WHEN row_number() OVER (PARTITION BY w.stream_id) = 1 THEN uk.wrapped_keys END AS wrapped_keys,
           CASE WHEN row_number() OVER (PARTITION BY w.stream_id) = 1 THEN
                (SELECT CAST(jsonb_agg(to_jsonb(c) - 'stream_id') AS text)
                   FROM request_counts c WHERE c.stream_id = w.stream_id) END AS counts_json,
           CASE WHEN row_number() OVER (PARTITION BY w.stream_id) = 1 THEN f.found_json END AS found_json,
           rc.request_id AS receipt_request_id, rc.created_at AS receipt_created_at,
           e.global_position, e.event_type, e.user_id, e.field_values
      FROM {streams} AS w(stream_id, user_id)
      LEFT JOIN LATERAL (
            SELECT array_agg(key_id ORDER BY created_at, key_id) AS key_ids,
                   array_agg(master_key_id ORDER BY created_at, key_id) AS master_key_ids,
                   array_agg(wrapped_key ORDER BY created_at, key_id) AS wrapped_keys
              FROM subject_keys WHERE user_id = w.user_id
            ) uk ON true
      LEFT JOIN stream_snapshots s ON s.stream_id = w.stream_id
      LEFT JOIN receipts rc ON rc.receipt_id = CAST(:receipt_id AS uuid)
      LEFT JOIN LATERAL (
            SELECT array_agg(r.recipient_at) AS positions,
                   CAST(jsonb_agg(jsonb_build_array(r.recipient_at, r.request)) AS text) AS found_json
              FROM stream_requests r
             WHERE r.request_id = ANY(ARRAY(
                       SELECT unnest(CAST(:request_ids AS uuid[]))
                       UNION ALL SELECT t.request_id FROM reset_tokens t WHERE t.token_hash = CAST(:token_hash AS text)
                       UNION ALL SELECT rc.request_id))
               AND r.stream_id = w.stream_id
            ) f ON true
      LEFT JOIN LATERAL (
            SELECT global_position, event_type, payload->>'user_id' AS user_id,
                   ARRAY(SELECT payload->>f FROM unnest({fields}) WITH ORDINALITY AS u(f, n) ORDER BY n)
                       AS field_values
              FROM events
             WHERE global_position = ANY(ARRAY(SELECT CAST(p.value AS bigint)
                                                 FROM jsonb_each_text(s.state->'recipient_at') p)
                                         || coalesce(f.positions, CAST(ARRAY[] AS bigint[])))
            ) e ON true
"""
# A decision reads one stream, and for it the statement takes scalars and
# spells the fields out: PostgreSQL then settles on a generic plan after five
# runs. Given arrays, it judged a generic plan (sized for arrays of unknown
# length) dearer than planning anew, and planned on every call: 0.56 ms of
# planning against 0.15 ms of running (bench/RESULTS.md, "Where the database
# server's time went"). Delivery's fresh read of a batch's streams keeps arrays.
# A generic plan is kept until autovacuum's next ANALYZE, so it must stay
# good as the log grows: the requests' events are found through the primary
# key (``= ANY(ARRAY(...))``, estimated at 10 positions). As ``IN (SELECT ...
# jsonb_each_text ...)``, estimated at 100, the plan for a log of a few
# hundred events scanned the whole of it, and went on scanning as it grew:
# 7.3 ms a call (tests/eventlog/test_decision_plans.py).
_ONE_STREAM = "(SELECT CAST(:stream_id AS text), CAST(:user_id AS text))"
_STREAMS = "unnest(CAST(:stream_ids AS text[]), CAST(:user_ids AS text[]))"


@cache
def decision_read(fields: tuple[str, ...], one_stream: bool) -> TextClause:
    """The statement above for these personal fields, for one stream (scalars) or several (arrays)."""
    if not all(re.fullmatch("[a-z_]+", name) for name in fields):  # written into the SQL: names only
        raise ValueError(f"not a field name: {fields!r}")
    spelled = "CAST(ARRAY[{}] AS text[])".format(", ".join(f"'{name}'" for name in fields))
    return text(_DECISION_READ.format(streams=_ONE_STREAM if one_stream else _STREAMS, fields=spelled))


def snapshots_for_decision(
    connection: Connection, users_by_stream: Mapping[str, str], fields: Sequence[str], *,
    request_ids: Sequence[UUID] = (), token_hash: str | None = None, receipt_id: UUID | None = None,
) -> Sequence[Any]:
    """Each stream's last version and snapshot, its requests' sealed ``fields`` and its user's data keys;
    see above. ``users_by_stream``: stream id -> the user it belongs to. With them, the request rows of
    ``request_ids``, of the link ``token_hash`` and of the receipt ``receipt_id`` names, where they belong
    to the stream, and that receipt. Rows as ``execute_read`` returns them: the columns as attributes."""
    one_stream = len(users_by_stream) == 1
    if one_stream:
        [(stream_id, user_id)] = users_by_stream.items()
        streams: dict[str, Any] = {"stream_id": stream_id, "user_id": user_id}
    else:
        streams = {"stream_ids": list(users_by_stream), "user_ids": list(users_by_stream.values())}
    statement = decision_read(tuple(fields), one_stream)
    looked_up = {"request_ids": list(request_ids), "token_hash": token_hash, "receipt_id": receipt_id}
    return execute_read(connection, statement, {**streams, **looked_up})


# The payloads of some streams, as stored (sealed): what an erasure would
# reach is counted from them without opening anything.
STREAM_PAYLOADS = text("""
    SELECT event_type, payload FROM events WHERE stream_id = ANY(CAST(:stream_ids AS text[]))
""")


def stream_payloads(connection: Connection, stream_ids: Sequence[str]) -> Sequence[Row[Any]]:
    """(event_type, payload) of every event of these streams, sealed, in no particular order."""
    return connection.execute(STREAM_PAYLOADS, {"stream_ids": list(stream_ids)}).all() if stream_ids else []
