-- Payload retention. A received payload (card holder names, emails, addresses) is kept only as
-- long as allowed; what the invariants need (key, fingerprint, canonical facts, entries, audit)
-- stays for ever. A payload is erased only through an erasure: an append-only row saying who
-- erased which payloads, why and when, that the erased rows point at. The guard on
-- settlement_events allows that one change and keeps refusing every other.

CREATE TABLE payload_erasures (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at              TIMESTAMPTZ NOT NULL DEFAULT now(),
    actor           TEXT NOT NULL CHECK (actor <> ''),
    reason          TEXT NOT NULL CHECK (reason <> ''),
    -- expiry: retention.payload_days ran out; request: a person erased one event's payload.
    scope           TEXT NOT NULL CHECK (scope IN ('expiry', 'request')),
    -- For an expiry, the source and the time before which its payloads expired.
    source          TEXT,
    received_before TIMESTAMPTZ,
    CONSTRAINT payload_erasures_expiry CHECK ((scope = 'expiry') = (received_before IS NOT NULL))
);

CREATE FUNCTION payload_erasures_refuse_change() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'payload erasures are append-only: % refused', TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER payload_erasures_immutable BEFORE UPDATE OR DELETE ON payload_erasures
    FOR EACH ROW EXECUTE FUNCTION payload_erasures_refuse_change();
CREATE TRIGGER payload_erasures_no_truncate BEFORE TRUNCATE ON payload_erasures
    FOR EACH STATEMENT EXECUTE FUNCTION payload_erasures_refuse_change();

ALTER TABLE settlement_events ADD COLUMN payload_erased_by BIGINT REFERENCES payload_erasures (id);
ALTER TABLE settlement_events ADD CONSTRAINT settlement_events_erased_payload
    CHECK (payload_erased_by IS NULL OR payload = '');
ALTER TABLE event_conflicts ADD COLUMN payload_erased_by BIGINT REFERENCES payload_erasures (id);
ALTER TABLE event_conflicts ADD CONSTRAINT event_conflicts_erased_payload
    CHECK (payload_erased_by IS NULL OR payload = '');

-- The payloads still kept, oldest first: what an expiry walks (erased rows leave it).
CREATE INDEX settlement_events_payload_kept ON settlement_events (received_at)
    WHERE payload_erased_by IS NULL;

-- What was received never changes and is never deleted: only status, job and their time move,
-- the settling entry is set once, and the payload may be erased once, by an erasure, from an
-- event that is settled (posted or discarded) with no open conflict.
CREATE OR REPLACE FUNCTION settlement_events_guard() RETURNS trigger AS $$
DECLARE
    erasing BOOLEAN;
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'settlement_events are never deleted (event %)', OLD.id
            USING ERRCODE = 'restrict_violation';
    END IF;
    erasing := OLD.payload_erased_by IS NULL AND NEW.payload_erased_by IS NOT NULL;
    IF (NEW.id, NEW.source, NEW.external_id, NEW.kind, NEW.movement_id, NEW.fingerprint,
        NEW.facts, NEW.validation_error, NEW.received_at)
       IS DISTINCT FROM
       (OLD.id, OLD.source, OLD.external_id, OLD.kind, OLD.movement_id, OLD.fingerprint,
        OLD.facts, OLD.validation_error, OLD.received_at)
       OR (NEW.payload IS DISTINCT FROM OLD.payload AND NOT erasing)
       OR (OLD.payload_erased_by IS NOT NULL AND NEW.payload_erased_by IS DISTINCT FROM OLD.payload_erased_by)
       OR (OLD.posted_entry_id IS NOT NULL AND NEW.posted_entry_id IS DISTINCT FROM OLD.posted_entry_id) THEN
        RAISE EXCEPTION 'a received settlement event is immutable (event %)', OLD.id
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF erasing AND (NEW.status NOT IN ('posted', 'discarded') OR EXISTS (
            SELECT 1 FROM event_conflicts c WHERE c.event_id = NEW.id AND c.state = 'open')) THEN
        RAISE EXCEPTION 'event % is still in use (%, or an open conflict): its payload stays', OLD.id, NEW.status
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
