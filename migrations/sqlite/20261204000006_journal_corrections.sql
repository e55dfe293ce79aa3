-- Finance corrections; see the PostgreSQL migration of the same name.
CREATE TABLE journal_corrections (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    at                  TEXT NOT NULL,
    actor               TEXT NOT NULL CHECK (actor <> ''),
    reason              TEXT NOT NULL CHECK (reason <> ''),
    entry_id            INTEGER NOT NULL UNIQUE REFERENCES journal_entries (id),
    reversal_entry_id   INTEGER NOT NULL UNIQUE REFERENCES journal_entries (id),
    correction_entry_id INTEGER UNIQUE REFERENCES journal_entries (id)
);

CREATE TRIGGER journal_corrections_no_update BEFORE UPDATE ON journal_corrections
BEGIN
    SELECT RAISE(ABORT, 'the journal is append-only: UPDATE on journal_corrections is refused');
END;
CREATE TRIGGER journal_corrections_no_delete BEFORE DELETE ON journal_corrections
BEGIN
    SELECT RAISE(ABORT, 'the journal is append-only: DELETE on journal_corrections is refused');
END;
