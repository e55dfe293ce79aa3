-- Payload retention; see the PostgreSQL migration of the same name. A payload is erased only
-- through an append-only erasure row the erased rows point at; the guard allows that one change.

CREATE TABLE payload_erasures (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    at              TEXT NOT NULL,
    actor           TEXT NOT NULL CHECK (actor <> ''),
    reason          TEXT NOT NULL CHECK (reason <> ''),
    scope           TEXT NOT NULL CHECK (scope IN ('expiry', 'request')),
    source          TEXT,
    received_before TEXT,
    CHECK ((scope = 'expiry') = (received_before IS NOT NULL))
);

CREATE TRIGGER payload_erasures_no_update BEFORE UPDATE ON payload_erasures
BEGIN
    SELECT RAISE(ABORT, 'payload erasures are append-only: UPDATE refused');
END;
CREATE TRIGGER payload_erasures_no_delete BEFORE DELETE ON payload_erasures
BEGIN
    SELECT RAISE(ABORT, 'payload erasures are append-only: DELETE refused');
END;

ALTER TABLE settlement_events ADD COLUMN payload_erased_by INTEGER
    REFERENCES payload_erasures (id) CHECK (payload_erased_by IS NULL OR payload = '');
ALTER TABLE event_conflicts ADD COLUMN payload_erased_by INTEGER
    REFERENCES payload_erasures (id) CHECK (payload_erased_by IS NULL OR payload = '');

CREATE INDEX settlement_events_payload_kept ON settlement_events (received_at)
    WHERE payload_erased_by IS NULL;

DROP TRIGGER settlement_events_immutable;
CREATE TRIGGER settlement_events_immutable BEFORE UPDATE ON settlement_events
WHEN NEW.id IS NOT OLD.id OR NEW.source IS NOT OLD.source OR NEW.external_id IS NOT OLD.external_id
  OR NEW.kind IS NOT OLD.kind OR NEW.movement_id IS NOT OLD.movement_id
  OR NEW.fingerprint IS NOT OLD.fingerprint OR NEW.facts IS NOT OLD.facts
  OR NEW.validation_error IS NOT OLD.validation_error OR NEW.received_at IS NOT OLD.received_at
  OR (NEW.payload IS NOT OLD.payload
      AND NOT (OLD.payload_erased_by IS NULL AND NEW.payload_erased_by IS NOT NULL))
  OR (OLD.payload_erased_by IS NOT NULL AND NEW.payload_erased_by IS NOT OLD.payload_erased_by)
  OR (OLD.posted_entry_id IS NOT NULL AND NEW.posted_entry_id IS NOT OLD.posted_entry_id)
BEGIN
    SELECT RAISE(ABORT, 'a received settlement event is immutable');
END;

-- The payload stays while the event is in flight, in an open dead letter or in an open conflict.
CREATE TRIGGER settlement_events_payload_in_use BEFORE UPDATE ON settlement_events
WHEN OLD.payload_erased_by IS NULL AND NEW.payload_erased_by IS NOT NULL
  AND (NEW.status NOT IN ('posted', 'discarded')
       OR EXISTS (SELECT 1 FROM event_conflicts c WHERE c.event_id = NEW.id AND c.state = 'open'))
BEGIN
    SELECT RAISE(ABORT, 'the event is still in use (in flight, in an open dead letter, or in an open conflict): its payload stays');
END;
