-- Finance corrections: an entry is never edited; a person reverses it and may post the lines it
-- should have had, both as ordinary (balanced, immutable) entries, and this row says who did it,
-- why, and which entries they wrote. One correction per entry, kept for ever.
CREATE TABLE journal_corrections (
    id                  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at                  TIMESTAMPTZ NOT NULL,
    actor               TEXT NOT NULL CHECK (actor <> ''),
    reason              TEXT NOT NULL CHECK (reason <> ''),
    entry_id            BIGINT NOT NULL UNIQUE REFERENCES journal_entries (id),
    reversal_entry_id   BIGINT NOT NULL UNIQUE REFERENCES journal_entries (id),
    -- Absent when the entry was void and is reversed only.
    correction_entry_id BIGINT UNIQUE REFERENCES journal_entries (id)
);

CREATE TRIGGER journal_corrections_immutable BEFORE UPDATE OR DELETE ON journal_corrections
    FOR EACH ROW EXECUTE FUNCTION journal_refuse_change();
CREATE TRIGGER journal_corrections_no_truncate BEFORE TRUNCATE ON journal_corrections
    FOR EACH STATEMENT EXECUTE FUNCTION journal_refuse_change();
