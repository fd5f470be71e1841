-- authledger: the only DDL. Applied by `authledger db init`; every statement
-- is idempotent so that running it twice is safe.

-- The application role may read and append the log, never change it.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'authledger_app') THEN
        CREATE ROLE authledger_app NOLOGIN;
    END IF;
END
$$;

CREATE TABLE IF NOT EXISTS schema_version (
    version     integer PRIMARY KEY,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- The event log. One row per fact; never updated, never deleted.
CREATE TABLE IF NOT EXISTS events (
    global_position  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    stream_id        text        NOT NULL,
    stream_version   integer     NOT NULL CHECK (stream_version > 0),
    event_id         uuid        NOT NULL UNIQUE,
    event_type       text        NOT NULL,
    schema_version   integer     NOT NULL,
    payload          jsonb       NOT NULL,
    metadata         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    recorded_at      timestamptz NOT NULL DEFAULT now(),
    -- Readers that follow the whole log order by commit horizon, not by
    -- global_position: a bigint identity commits out of order.
    transaction_id   xid8        NOT NULL DEFAULT pg_current_xact_id(),
    CONSTRAINT events_stream_version_key UNIQUE (stream_id, stream_version)
);

CREATE INDEX IF NOT EXISTS events_by_horizon ON events (transaction_id, global_position);

CREATE OR REPLACE FUNCTION events_are_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % is not allowed', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'Record a new event that corrects the old one instead.';
END
$$;

DROP TRIGGER IF EXISTS events_no_update_or_delete ON events;
CREATE TRIGGER events_no_update_or_delete
    BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_are_append_only();

DROP TRIGGER IF EXISTS events_no_truncate ON events;
CREATE TRIGGER events_no_truncate
    BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_are_append_only();

-- Wake followers as soon as a transaction that appended events commits
-- (NOTIFY is delivered at commit, once per channel and payload):
-- authledger_events for whole-log readers, authledger_outbox for idle
-- workers when there is new mail (or a webhook delivery) to claim.
CREATE OR REPLACE FUNCTION events_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- A set-based claim that found nothing due inserts no row, but a
    -- statement trigger fires all the same: wake nobody for it.
    IF NOT EXISTS (SELECT FROM new_events) THEN
        RETURN NULL;
    END IF;
    PERFORM pg_notify('authledger_events', '');
    IF EXISTS (SELECT FROM new_events WHERE event_type IN ('EmailQueued', 'WebhookQueued', 'LeaseReleased')) THEN
        PERFORM pg_notify('authledger_outbox', '');
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS events_notify_on_insert ON events;
CREATE TRIGGER events_notify_on_insert
    AFTER INSERT ON events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION events_notify();

REVOKE ALL ON events FROM PUBLIC;
REVOKE UPDATE, DELETE, TRUNCATE ON events FROM authledger_app;
GRANT SELECT, INSERT ON events TO authledger_app;
GRANT SELECT ON schema_version TO authledger_app;

-- /metrics reports how long the oldest open transaction has held back the
-- log's readers, which needs other sessions' rows of pg_stat_activity. Only
-- a superuser may grant this; elsewhere the metric reads 0 and
-- `authledger projections status` (run as the owner) still tells.
DO $$
BEGIN
    GRANT pg_read_all_stats TO authledger_app;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'authledger_app cannot be granted pg_read_all_stats; horizon age is reported by projections status only';
END
$$;

-- Inline projections: written in the same transaction as the events they
-- fold, and always equal to a replay of the log (projections/ holds the folds).

-- One row per outbound email. Personal data (the recipient) is deliberately
-- absent: the worker reads it from the request's events at send time.
CREATE TABLE IF NOT EXISTS email_outbox (
    message_id           uuid PRIMARY KEY,
    flow                 text        NOT NULL,
    template             text        NOT NULL,
    user_id              text        NOT NULL,
    request_id           uuid        NOT NULL,
    state                text        NOT NULL
        CHECK (state IN ('pending', 'leased', 'sent', 'skipped', 'failed', 'abandoned', 'unknown')),
    available_at         timestamptz NOT NULL,
    queued_at            timestamptz NOT NULL,
    stream_version       integer     NOT NULL,
    lease_owner          text,
    lease_token          uuid,
    lease_expires_at     timestamptz,
    attempt_count        integer     NOT NULL DEFAULT 0,
    provider_message_id  text,
    last_error           text,
    skip_reason          text,
    finished_at          timestamptz,
    unknown_outcomes     integer     NOT NULL DEFAULT 0
);
-- Version 7: a message a non-idempotent provider may have received already
-- ends 'unknown' instead of being sent again (domain.delivery.outcome_left_unknown).
ALTER TABLE email_outbox ADD COLUMN IF NOT EXISTS unknown_outcomes integer NOT NULL DEFAULT 0;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'email_outbox'::regclass AND conname = 'email_outbox_state_check'
                      AND pg_get_constraintdef(oid) LIKE '%unknown%') THEN
        ALTER TABLE email_outbox DROP CONSTRAINT IF EXISTS email_outbox_state_check;
        ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_state_check
            CHECK (state IN ('pending', 'leased', 'sent', 'skipped', 'failed', 'abandoned', 'unknown'));
    END IF;
END
$$;

-- The claim query's index: only unfinished rows, so sent mail leaves the hot index.
CREATE INDEX IF NOT EXISTS email_outbox_due ON email_outbox (available_at)
    WHERE state IN ('pending', 'leased');
-- The claim's walk over the tenants with unfinished mail, and each tenant's
-- oldest due rows (infra/eventlog/email_leases.py, CLAIM: the expression is
-- its TENANT_OF_ROW, word for word): claims go round-robin by tenant.
CREATE INDEX IF NOT EXISTS email_outbox_due_by_tenant
    ON email_outbox ((CASE WHEN strpos(user_id, ' ') > 0 THEN split_part(user_id, ' ', 1) ELSE '' END), available_at)
    WHERE state IN ('pending', 'leased');
-- No query reads the outbox by request; the index only made every claim and
-- record write one more entry (bench/RESULTS.md, "Cost growth in log size").
DROP INDEX IF EXISTS email_outbox_by_request;
-- Given-up mail, newest first (`outbox stuck`, the console's outbox page): a
-- partial index holding only failed, abandoned and unknown rows, which are few.
-- (Before version 7 it held no unknown rows: re-made once, when it lacks them.)
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_indexes WHERE indexname = 'email_outbox_given_up'
                AND indexdef NOT LIKE '%unknown%') THEN
        DROP INDEX email_outbox_given_up;
    END IF;
END
$$;
CREATE INDEX IF NOT EXISTS email_outbox_given_up ON email_outbox (finished_at)
    WHERE state IN ('abandoned', 'failed', 'unknown');

CREATE TABLE IF NOT EXISTS reset_tokens (
    request_id  uuid PRIMARY KEY,
    token_hash  text        NOT NULL,
    user_id     text        NOT NULL,
    key_id      text        NOT NULL,
    message_id  uuid        NOT NULL,
    expires_at  timestamptz NOT NULL,
    status      text        NOT NULL CHECK (status IN ('open', 'superseded', 'completed'))
);
-- A presented link finds its request by the token's hash. The hashes are
-- random, so each new request's entry lands on a random page of the index:
-- as a unique b-tree of the hex text, on a log of 2.5M reset requests, 299 MB
-- of pages that shared_buffers could not hold, a page read and a full-page
-- image in the WAL on about every insert, 302 µs against 34 µs on a small log
-- (bench/RESULTS.md, "Reset create on the large log"). A hash index keeps a
-- 4-byte hash code per entry: a fifth of the pages. It cannot be UNIQUE, and
-- need not be: two requests' tokens are HMACs of two request ids, and a
-- lookup that found another user's request would find no such token on that
-- user's stream, which decides.
CREATE INDEX IF NOT EXISTS reset_tokens_by_token_hash ON reset_tokens USING hash (token_hash);
ALTER TABLE reset_tokens DROP CONSTRAINT IF EXISTS reset_tokens_token_hash_key;

GRANT SELECT, INSERT, UPDATE, DELETE ON email_outbox, reset_tokens TO authledger_app;

-- One row per OTP challenge, so that a code presented with its challenge id
-- finds the user's stream. No recipient and no code: the code is never
-- stored, the address stays in the events.
CREATE TABLE IF NOT EXISTS otp_challenges (
    challenge_id  uuid PRIMARY KEY,
    user_id       text        NOT NULL,
    status        text        NOT NULL CHECK (status IN ('open', 'superseded', 'verified', 'locked')),
    expires_at    timestamptz NOT NULL,
    failures      integer     NOT NULL CHECK (failures >= 0),
    message_id    uuid        NOT NULL,
    key_id        text        NOT NULL,
    purpose       text        NOT NULL
);

-- Idempotency receipts of both flows: what a key named, per client, flow and
-- user. receipt_id is a digest of that scope (projections/receipts.py). The
-- decision on a replay is made on the user's stream; this is the fast lookup.
CREATE TABLE IF NOT EXISTS receipts (
    receipt_id       uuid PRIMARY KEY,
    flow             text        NOT NULL CHECK (flow IN ('reset', 'otp')),
    client           text,
    user_id          text        NOT NULL,
    idempotency_key  text        NOT NULL,
    request_id       uuid        NOT NULL,
    message_id       uuid        NOT NULL,
    created_at       timestamptz NOT NULL
);

GRANT SELECT, INSERT, UPDATE, DELETE ON otp_challenges, receipts TO authledger_app;

-- Hash-chain seals (issue 7, docs/audit.md): one row per event, in the log's
-- horizon order, link_n = SHA-256(0x01 || link_{n-1} || SHA-256(0x00 ||
-- canonical event)). Written by the sealer (a catch-up reader); the newest
-- row is its checkpoint. Append-only like the log itself: a seal that could
-- be rewritten would prove nothing. stream_id and stream_version are copies,
-- so that a deleted event can still be named.
CREATE TABLE IF NOT EXISTS seals (
    chain_index      bigint      PRIMARY KEY CHECK (chain_index >= 0),
    global_position  bigint      NOT NULL UNIQUE,
    transaction_id   xid8        NOT NULL,
    stream_id        text        NOT NULL,
    stream_version   integer     NOT NULL,
    link             bytea       NOT NULL CHECK (length(link) = 32),
    sealed_at        timestamptz NOT NULL DEFAULT now()
);

DROP TRIGGER IF EXISTS seals_no_update_or_delete ON seals;
CREATE TRIGGER seals_no_update_or_delete
    BEFORE UPDATE OR DELETE ON seals
    FOR EACH ROW EXECUTE FUNCTION events_are_append_only();

DROP TRIGGER IF EXISTS seals_no_truncate ON seals;
CREATE TRIGGER seals_no_truncate
    BEFORE TRUNCATE ON seals
    FOR EACH STATEMENT EXECUTE FUNCTION events_are_append_only();

REVOKE ALL ON seals FROM PUBLIC;
REVOKE UPDATE, DELETE, TRUNCATE ON seals FROM authledger_app;  -- db init takes back a stray grant, as for events
GRANT SELECT, INSERT ON seals TO authledger_app;

-- Data keys of users whose events hold personal data (infra/eventlog/subject_keys.py):
-- 32 random bytes each, stored only wrapped by a master key from
-- configuration (master_key_id names it). Events carry personal fields
-- encrypted under these keys; deleting a user's rows erases their personal
-- data everywhere at once (`authledger privacy forget`). This is the one
-- table whose rows may be deleted. A row is updated only to re-wrap its key
-- under a newer master key (`authledger privacy rewrap`): the key and its id
-- stay, so the application may change those two columns and no other.
-- Usually one key per user: user_id is not unique so that two writers
-- creating a user's first key at once never wait for each other's transaction.
CREATE TABLE IF NOT EXISTS subject_keys (
    key_id         text PRIMARY KEY,
    user_id        text        NOT NULL,
    master_key_id  text        NOT NULL,
    wrapped_key    bytea       NOT NULL CHECK (length(wrapped_key) = 60),  -- nonce, key, GCM tag
    created_at     timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS subject_keys_by_user ON subject_keys (user_id);
-- A new user's first key is wrapped only after the current master key has
-- unwrapped one key it wrapped before (infra/eventlog/subject_keys.py,
-- SAMPLE_UNDER_MASTER). Without this index that probe is a sequential scan,
-- which reads every older key when few or none are under the current master
-- key (after a rotation, until `privacy rewrap`): a cost that grew with the
-- number of users on each new user's request. Deduplicated, it stays small.
CREATE INDEX IF NOT EXISTS subject_keys_by_master ON subject_keys (master_key_id);

REVOKE ALL ON subject_keys FROM PUBLIC;
GRANT SELECT, INSERT, DELETE ON subject_keys TO authledger_app;
GRANT UPDATE (master_key_id, wrapped_key) ON subject_keys TO authledger_app;

-- API keys of the HTTP API (issues 5 and 14): an inline projection of the
-- client:<name> streams, one row per key, revoked keys kept. Only the SHA-256
-- of a key is kept; the key is shown once when it is issued. scopes is
-- space-separated, in the order of domain.clients.SCOPES.
CREATE TABLE IF NOT EXISTS api_keys (
    key_id      text PRIMARY KEY,
    key_hash    text        NOT NULL UNIQUE,
    client      text        NOT NULL,
    tenant      text        NOT NULL,
    scopes      text        NOT NULL,
    status      text        NOT NULL CHECK (status IN ('active', 'revoked')),
    created_at  timestamptz NOT NULL,
    revoked_at  timestamptz
);

CREATE INDEX IF NOT EXISTS api_keys_by_client ON api_keys (client);

GRANT SELECT, INSERT, UPDATE, DELETE ON api_keys TO authledger_app;

-- Version 4 replaced api_clients (one row per client, its newest key) with
-- api_keys. A database from before holds only legacy registrations, whose
-- fold (projections/api_keys.py) is exactly the old row under the key id
-- legacy:<name>, default tenant, scopes of that time. The old table is
-- dropped rather than left behind: a release from before 4 still running
-- during a deploy then fails closed instead of accepting keys revoked since.
DO $$
BEGIN
    IF to_regclass('api_clients') IS NOT NULL THEN
        INSERT INTO api_keys (key_id, key_hash, client, tenant, scopes, status, created_at, revoked_at)
        SELECT 'legacy:' || name, key_hash, name, 'default', 'send verify review', status, created_at, revoked_at
          FROM api_clients
            ON CONFLICT DO NOTHING;
        DROP TABLE api_clients;
    END IF;
END
$$;

-- Webhook endpoints of each tenant (an inline projection of the
-- webhooks:<tenant> streams, domain/webhooks.py). Secrets only sealed
-- (AES-GCM under the master key, infra/webhooks/secrets.py), as the events
-- hold them; removed endpoints keep their row.
CREATE TABLE IF NOT EXISTS webhook_endpoints (
    endpoint_id             text PRIMARY KEY,
    tenant                  text        NOT NULL,
    url                     text        NOT NULL,
    event_types             text        NOT NULL,
    status                  text        NOT NULL CHECK (status IN ('active', 'removed')),
    secret_id               text        NOT NULL,
    master_key_id           text        NOT NULL,
    sealed_secret           text        NOT NULL,
    created_at              timestamptz NOT NULL,
    rotated_at              timestamptz,
    previous_secret_id      text,
    previous_master_key_id  text,
    previous_sealed_secret  text,
    previous_until          timestamptz,
    removed_at              timestamptz
);

GRANT SELECT, INSERT, UPDATE, DELETE ON webhook_endpoints TO authledger_app;

-- Tenants created with `authledger tenants create` (an inline projection of
-- the tenant:<name> streams). The default tenant exists without a row.
CREATE TABLE IF NOT EXISTS tenants (
    name        text PRIMARY KEY,
    created_at  timestamptz NOT NULL
);

GRANT SELECT, INSERT, UPDATE, DELETE ON tenants TO authledger_app;

-- Each configured tenant's current settings (issue 36; an inline projection
-- of the TenantConfigured facts on tenant:<name>, projections/tenants.py),
-- the default tenant's too. version counts its configurations. purposes is a
-- JSON object, purpose name -> display text: the OTP purposes it allows, {}
-- for the deployment's (AUTHLEDGER_OTP_PURPOSES). A tenant never configured
-- has no row.
CREATE TABLE IF NOT EXISTS tenant_settings (
    tenant         text        PRIMARY KEY,
    version        integer     NOT NULL,
    purposes       text        NOT NULL,
    configured_at  timestamptz NOT NULL
);

GRANT SELECT, INSERT, UPDATE, DELETE ON tenant_settings TO authledger_app;

-- Version 7 (issue 38): every other setting of the tenant (its reset URL,
-- sender, reply-to, product name, support contact, default locale, template
-- overrides and policy overrides) as one JSON object of the fields it set;
-- a field it never set, or cleared, is absent: the deployment's applies.
-- takeover_changes counts the configurations that changed where its links
-- or mail go (reset URL, sender, sender name, reply-to), for the metric
-- authledger_tenant_takeover_changes_total.
ALTER TABLE tenant_settings ADD COLUMN IF NOT EXISTS overrides text NOT NULL DEFAULT '{}';
ALTER TABLE tenant_settings ADD COLUMN IF NOT EXISTS takeover_changes integer NOT NULL DEFAULT 0;

-- Catch-up projections (issue 6, see infra/projector/registry.py): they
-- follow the log by the transaction-id horizon and store how far they got in
-- projection_checkpoints, in the same transaction as the rows they write, so
-- a reader killed mid-batch resumes without losing or counting anything twice.
CREATE TABLE IF NOT EXISTS projection_checkpoints (
    projection       text PRIMARY KEY,
    transaction_id   xid8        NOT NULL DEFAULT '0'::xid8,
    global_position  bigint      NOT NULL DEFAULT 0,
    events_applied   bigint      NOT NULL DEFAULT 0 CHECK (events_applied >= 0),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

INSERT INTO projection_checkpoints (projection) VALUES ('delivery_stats'), ('audit_index')
    ON CONFLICT DO NOTHING;

-- delivery_stats: one row per message, so that percentiles of the time from
-- queued to accepted are exact (projections/delivery_stats.py); the report
-- aggregates by the UTC day queued, flow and outcome.
CREATE TABLE IF NOT EXISTS delivery_messages (
    message_id      uuid PRIMARY KEY,
    flow            text        NOT NULL,
    template        text        NOT NULL,
    day             date        NOT NULL,
    queued_at       timestamptz NOT NULL,
    outcome         text        NOT NULL
        CHECK (outcome IN ('pending', 'sent', 'skipped', 'failed', 'abandoned', 'unknown')),
    attempts        integer     NOT NULL CHECK (attempts >= 0),
    finished_at     timestamptz,
    time_to_accept  interval
);

-- Version 7: a message may end 'unknown' (see email_outbox above).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'delivery_messages'::regclass AND conname = 'delivery_messages_outcome_check'
                      AND pg_get_constraintdef(oid) LIKE '%unknown%') THEN
        ALTER TABLE delivery_messages DROP CONSTRAINT IF EXISTS delivery_messages_outcome_check;
        ALTER TABLE delivery_messages ADD CONSTRAINT delivery_messages_outcome_check
            CHECK (outcome IN ('pending', 'sent', 'skipped', 'failed', 'abandoned', 'unknown'));
    END IF;
END
$$;

CREATE INDEX IF NOT EXISTS delivery_messages_by_day ON delivery_messages (day, flow, outcome);
-- The console's 24 h chart (infra/delivery/overview.py) counts by hour queued
-- and by hour finished; a catch-up table, so these cost the send path nothing.
CREATE INDEX IF NOT EXISTS delivery_messages_by_queued ON delivery_messages (queued_at);
CREATE INDEX IF NOT EXISTS delivery_messages_by_finished ON delivery_messages (finished_at, outcome)
    WHERE finished_at IS NOT NULL;

-- audit_index: user, request and message -> the log positions that name
-- them. No recipient, not even a digest: addresses are personal data, erased
-- with their user's key ('recipient' stays allowed for older rows).
CREATE TABLE IF NOT EXISTS audit_index (
    kind             text   NOT NULL CHECK (kind IN ('user', 'recipient', 'request', 'message')),
    value            text   NOT NULL,
    global_position  bigint NOT NULL,
    PRIMARY KEY (kind, value, global_position)
);

GRANT SELECT, INSERT, UPDATE, DELETE ON delivery_messages, audit_index TO authledger_app;
GRANT SELECT, INSERT, UPDATE ON projection_checkpoints TO authledger_app;

-- Floods counted, not logged one by one (issue 13, domain/decisions.py
-- RequestsCounted): the calls of a run of alike answers (refusals, repeats
-- binding a new key) after the first ones written in its window. Not a
-- projection of the log but its buffer: upserted in the transaction that
-- answers the call, emptied into a RequestsCounted event when the stream's
-- next event is appended, or by `serve` once its window (an hour) has closed
-- (infra/services/closed_counts.py). At most one row per stream and answer.
CREATE TABLE IF NOT EXISTS request_counts (
    stream_id     text        NOT NULL,
    answer        text        NOT NULL,  -- 'refused', 'reused' or 'rejected': see the constraint below
    flow          text        NOT NULL CHECK (flow IN ('reset', 'otp')),
    user_id       text        NOT NULL,
    window_start  timestamptz NOT NULL,
    first_at      timestamptz NOT NULL,
    last_at       timestamptz NOT NULL,
    count         bigint      NOT NULL CHECK (count > 0),
    clients       jsonb       NOT NULL,  -- distinct API clients (null: none), at most 20
    PRIMARY KEY (stream_id, answer)
);

-- Version 4 counts rejected presentations of known links and codes too
-- (issue 14). The constraint is replaced only when it lacks 'rejected', so
-- that re-applying this file takes no lock on an up-to-date table.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'request_counts'::regclass AND conname = 'request_counts_answer_check'
                      AND pg_get_constraintdef(oid) LIKE '%rejected%') THEN
        ALTER TABLE request_counts DROP CONSTRAINT IF EXISTS request_counts_answer_check;
        ALTER TABLE request_counts ADD CONSTRAINT request_counts_answer_check
            CHECK (answer IN ('refused', 'reused', 'rejected'));
    END IF;
END
$$;

-- Snapshots of the reset and OTP streams (issue 13, projections/snapshots.py):
-- the folded state at stream version `version`, so that a decision folds
-- only the events after it. An inline projection, rebuilt and verified like
-- the others. `state` holds no address and no nonce, only the log position
-- of the event that carries them, so `privacy forget` erases them here too.
CREATE TABLE IF NOT EXISTS stream_snapshots (
    stream_id  text    PRIMARY KEY,
    version    integer NOT NULL CHECK (version > 0),
    state      jsonb   NOT NULL
);

GRANT SELECT, INSERT, UPDATE, DELETE ON request_counts, stream_snapshots TO authledger_app;

-- Every reset request and OTP challenge as a decision reads it (schema 5,
-- projections/snapshots.py): its fields without address or nonce, and the
-- log position of the event that carries those. A snapshot keeps a stream's
-- live part only (open requests, and the last two hours' request times); a
-- decision finds a closed request here by the key its call carries (a link's
-- token, a code's challenge, an idempotency key's receipt, a queued email's
-- request), so what it reads follows neither the user's history nor the
-- hourly limit. Written by the same inline projection as stream_snapshots.
CREATE TABLE IF NOT EXISTS stream_requests (
    request_id    uuid    PRIMARY KEY,
    stream_id     text    NOT NULL,
    recipient_at  bigint  NOT NULL,
    request       jsonb   NOT NULL
);

GRANT SELECT, INSERT, UPDATE, DELETE ON stream_requests TO authledger_app;

-- Finding users by email address (issue 15, projections/address_index.py):
-- per scoped user, the keyed hashes ("<key id>:<hex HMAC>", space-separated)
-- of the addresses their requests went to. Never an address: the HMAC key is
-- derived from the token keys, which live in configuration. Emptied when the
-- user is erased. The GIN index answers `string_to_array(hashes, ' ') && ...`
-- (infra/services/address_index.py), whatever the size of the table.
CREATE TABLE IF NOT EXISTS address_index (
    user_id  text PRIMARY KEY,
    tenant   text NOT NULL,
    hashes   text NOT NULL
);
CREATE INDEX IF NOT EXISTS address_index_hashes ON address_index USING gin (string_to_array(hashes, ' '));

GRANT SELECT, INSERT, UPDATE, DELETE ON address_index TO authledger_app;

-- Limits beyond the user (issue 36, domain/send_limits.py): per window (a
-- clock hour), how many emails a recipient address got within its tenant,
-- and, when the application passes the end user's IP, how many emails and
-- checks that IP caused. Limiter state like request_counts, not a projection:
-- no event holds it and no rebuild brings it back (a lost row only gives a
-- counter its allowance back early). `counter` names the limit and keyed
-- hashes ("<key id>:<hex HMAC>") of the address and the IP, never the data
-- itself. Taken in the create's own transaction by one guarded upsert
-- (infra/services/send_limits.py); rows of past windows are deleted by `serve`.
CREATE TABLE IF NOT EXISTS limit_counts (
    counter       text        NOT NULL,
    window_start  timestamptz NOT NULL,
    count         integer     NOT NULL CHECK (count > 0),
    allowance     integer     NOT NULL CHECK (allowance > 0),
    PRIMARY KEY (counter, window_start)
);
CREATE INDEX IF NOT EXISTS limit_counts_by_window ON limit_counts (window_start);

GRANT SELECT, INSERT, UPDATE, DELETE ON limit_counts TO authledger_app;

-- The review console's signed-in sessions (infra/console/sessions.py), shared
-- by every `serve --processes N` process. Not an event-sourced projection:
-- sessions are not part of the audit story, so rows are written and deleted
-- here directly. No secret at rest: the SHA-256 of the session cookie names a
-- row, and the key is kept only as the SHA-256 api_keys already holds, so a
-- dump gives neither a working cookie nor a key. Rows idle past the timeout
-- are deleted when found and swept at sign-in (by last_seen).
CREATE TABLE IF NOT EXISTS console_sessions (
    cookie_hash  text        PRIMARY KEY,
    key_hash     text        NOT NULL,
    csrf         text        NOT NULL,
    created_at   timestamptz NOT NULL,
    last_seen    timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS console_sessions_by_last_seen ON console_sessions (last_seen);

GRANT SELECT, INSERT, UPDATE, DELETE ON console_sessions TO authledger_app;

-- The suppression list (issue 39, projections/suppressions.py): per scoped
-- user, the keyed hashes ("<key id>:<hex HMAC>", space-separated) of their
-- addresses that bounced for good or were complained about. A create looks
-- its recipient's hashes up by the GIN index, within the tenant
-- (infra/services/suppressions.py). Never an address; emptied when the user
-- is erased, as address_index is.
CREATE TABLE IF NOT EXISTS suppressions (
    user_id        text PRIMARY KEY,
    tenant         text NOT NULL,
    hashes         text NOT NULL,
    reason         text CHECK (reason IN ('bounce', 'complaint')),
    message_id     uuid,
    suppressed_at  timestamptz
);
CREATE INDEX IF NOT EXISTS suppressions_hashes ON suppressions USING gin (string_to_array(hashes, ' '));

GRANT SELECT, INSERT, UPDATE, DELETE ON suppressions TO authledger_app;

-- A provider's webhook names the email by the id the provider gave it at
-- ProviderAccepted (infra/services/feedback.py). Partial: unsent mail has none.
CREATE INDEX IF NOT EXISTS email_outbox_by_provider_id ON email_outbox (provider_message_id)
    WHERE provider_message_id IS NOT NULL;

-- What each version brought; `authledger db init` takes any older database to
-- the newest by re-applying this idempotent file.
--   1  the log, its guards, the inline and catch-up projections, seals, subject keys
--   2  the application role may re-wrap data keys (UPDATE of two subject_keys
--      columns, for `privacy rewrap`); stray grants on seals are revoked
--   3  request_counts (floods counted) and stream_snapshots (bounded folds)
--   4  api_keys (several scoped keys per client, in tenants) replaces api_clients; tenants;
--      address_index (reviewers find users by a keyed hash of their address);
--      indexes for the console's outbox page (24 h chart, given-up mail)
--      request_counts also counts rejected presentations of links and codes
--      console_sessions (console sign-ins every serve process shares)
--      subject_keys_by_master (the master-key probe of a new user's first key, by index)
--   5  stream_requests (a snapshot keeps a stream's live part; decisions look older requests up)
--   6  tenant_settings (a tenant's declared OTP purposes); limit_counts (emails per recipient
--      address and per end-user IP)
--   7  email_outbox.unknown_outcomes and the 'unknown' state (a non-idempotent provider's
--      message is not sent again past the retries an unknown outcome allows);
--      tenant_settings.overrides (a tenant's branding, templates and policy overrides) and
--      .takeover_changes; suppressions (the per-tenant suppression list);
--      email_outbox_by_provider_id (provider feedback finds its email by the provider's id);
--      webhook_endpoints (a tenant's webhook endpoints, their secrets sealed)
INSERT INTO schema_version (version) VALUES (1), (2), (3), (4), (5), (6), (7) ON CONFLICT DO NOTHING;
