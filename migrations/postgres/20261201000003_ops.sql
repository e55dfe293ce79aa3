-- Ops: decisions on dead letters and conflicts, each recorded in an append-only audit log in the
-- same transaction as the decision.

CREATE TABLE audit_log (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    actor        TEXT NOT NULL CHECK (actor <> ''),
    action       TEXT NOT NULL,
    reason       TEXT NOT NULL,
    subject_type TEXT NOT NULL CHECK (subject_type IN ('dead_letter', 'conflict')),
    subject_id   BIGINT NOT NULL,
    event_id     BIGINT REFERENCES settlement_events (id),
    before_state TEXT NOT NULL,
    after_state  TEXT NOT NULL,
    details      JSONB NOT NULL DEFAULT '{}'
);

CREATE INDEX audit_log_subject ON audit_log (subject_type, subject_id, id);
CREATE INDEX audit_log_event ON audit_log (event_id, id);

CREATE FUNCTION audit_log_refuse_change() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only: % refused', TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER audit_log_immutable BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_refuse_change();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_refuse_change();

ALTER TABLE dead_letters
    ADD COLUMN decided_by TEXT,
    ADD COLUMN decision_reason TEXT,
    -- The fresh job a requeue gave the event.
    ADD COLUMN requeued_job_id TEXT,
    ADD CONSTRAINT dead_letters_decided_by CHECK ((state = 'open') = (decided_by IS NULL));

ALTER TABLE event_conflicts
    ADD COLUMN resolved_at TIMESTAMPTZ,
    ADD COLUMN resolved_by TEXT,
    ADD COLUMN resolution_reason TEXT,
    ADD CONSTRAINT event_conflicts_resolved CHECK ((state = 'open') = (resolved_at IS NULL));

CREATE INDEX dead_letters_abandoned ON dead_letters (abandoned_at);
