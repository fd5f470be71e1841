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
    RAISE EXCEPTION 'events is append-only: % is not allowed', TG_OP
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

-- Wake idle workers and catch-up readers as soon as a transaction that
-- appended events commits (NOTIFY is delivered at commit, once per payload).
CREATE OR REPLACE FUNCTION events_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('authledger_events', '');
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS events_notify_on_insert ON events;
CREATE TRIGGER events_notify_on_insert
    AFTER INSERT ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_notify();

REVOKE ALL ON events FROM PUBLIC;
REVOKE UPDATE, DELETE, TRUNCATE ON events FROM authledger_app;
GRANT SELECT, INSERT ON events TO authledger_app;
GRANT SELECT ON schema_version TO authledger_app;

INSERT INTO schema_version (version) VALUES (1) ON CONFLICT DO NOTHING;
