-- Settlement events: one row per provider event, by natural key (source, external_id).
-- Written once by the ingress; afterwards only its status and current job change.

CREATE TABLE settlement_events (
    id                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source            TEXT NOT NULL,
    external_id       TEXT NOT NULL,
    status            TEXT NOT NULL
                      CHECK (status IN ('recorded', 'posted', 'abandoned', 'discarded')),
    -- The kind as delivered (null when the delivery named none); the movement id when valid.
    kind              TEXT,
    movement_id       TEXT,
    fingerprint       TEXT NOT NULL CHECK (fingerprint ~ '^[0-9a-f]{64}$'),
    -- Canonical facts when valid, else the validation error: exactly one of the two.
    facts             JSONB,
    validation_error  TEXT,
    -- This event's part of the delivery, as received.
    payload           TEXT NOT NULL,
    -- The event's current job (apalis.jobs.id). A requeue points it at a fresh job.
    job_id            TEXT NOT NULL,
    received_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    status_changed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT settlement_events_natural_key UNIQUE (source, external_id),
    CONSTRAINT settlement_events_facts_xor_error CHECK ((facts IS NULL) <> (validation_error IS NULL))
);

CREATE INDEX settlement_events_recorded ON settlement_events (received_at) WHERE status = 'recorded';
CREATE INDEX settlement_events_job ON settlement_events (job_id);

-- What was received never changes and is never deleted: only status, job and their time move.
CREATE FUNCTION settlement_events_guard() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'settlement_events are never deleted (event %)', OLD.id
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF (NEW.id, NEW.source, NEW.external_id, NEW.kind, NEW.movement_id, NEW.fingerprint,
        NEW.facts, NEW.validation_error, NEW.payload, NEW.received_at)
       IS DISTINCT FROM
       (OLD.id, OLD.source, OLD.external_id, OLD.kind, OLD.movement_id, OLD.fingerprint,
        OLD.facts, OLD.validation_error, OLD.payload, OLD.received_at) THEN
        RAISE EXCEPTION 'a received settlement event is immutable (event %)', OLD.id
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER settlement_events_guard
    BEFORE UPDATE OR DELETE ON settlement_events
    FOR EACH ROW EXECUTE FUNCTION settlement_events_guard();

CREATE FUNCTION settlement_events_refuse_truncate() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'settlement_events are never deleted (TRUNCATE refused)'
        USING ERRCODE = 'restrict_violation';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER settlement_events_no_truncate
    BEFORE TRUNCATE ON settlement_events
    FOR EACH STATEMENT EXECUTE FUNCTION settlement_events_refuse_truncate();

-- Deliveries that reused an event's key with different facts: kept for a person, one row per
-- distinct conflicting fingerprint (identical redeliveries only bump the counter).
CREATE TABLE event_conflicts (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id         BIGINT NOT NULL REFERENCES settlement_events (id),
    fingerprint      TEXT NOT NULL CHECK (fingerprint ~ '^[0-9a-f]{64}$'),
    facts            JSONB,
    validation_error TEXT,
    payload          TEXT NOT NULL,
    deliveries       INTEGER NOT NULL DEFAULT 1 CHECK (deliveries > 0),
    first_seen_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_seen_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    state            TEXT NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'resolved')),
    CONSTRAINT event_conflicts_one_per_fingerprint UNIQUE (event_id, fingerprint),
    CONSTRAINT event_conflicts_facts_xor_error CHECK ((facts IS NULL) <> (validation_error IS NULL))
);

CREATE INDEX event_conflicts_open ON event_conflicts (id) WHERE state = 'open';
