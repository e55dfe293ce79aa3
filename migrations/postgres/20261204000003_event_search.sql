-- Searching events (newest first, by id) stays on indexes whatever the filter, at any size.
-- An external id prefix is a byte range, so its index compares bytes (COLLATE "C").
CREATE INDEX settlement_events_external_id ON settlement_events ((external_id COLLATE "C"), id);
CREATE INDEX settlement_events_source ON settlement_events (source, id);
CREATE INDEX settlement_events_kind ON settlement_events (kind, id);
CREATE INDEX settlement_events_status ON settlement_events (status, id);
CREATE INDEX settlement_events_movement ON settlement_events (movement_id, id);
CREATE INDEX settlement_events_received ON settlement_events (received_at, id);
CREATE INDEX settlement_events_posted_entry ON settlement_events (posted_entry_id)
    WHERE posted_entry_id IS NOT NULL;
CREATE INDEX journal_entries_reference ON journal_entries (reference) WHERE reference IS NOT NULL;
CREATE INDEX journal_entries_event ON journal_entries (event_id);
CREATE INDEX dead_letters_error_code ON dead_letters (error_code, event_id);
CREATE INDEX dead_letters_error_class ON dead_letters (error_class, event_id);
