-- Finance reads. `recorded_at` is taken when the entry row is written (late in the posting
-- transaction, just before its commit) rather than when the transaction began, so "as recorded
-- at T" reports line up with commits as closely as the database allows.
ALTER TABLE journal_entries ALTER COLUMN recorded_at SET DEFAULT clock_timestamp();

CREATE INDEX journal_entries_recorded ON journal_entries (recorded_at);
CREATE INDEX journal_entries_reverses ON journal_entries (reverses_entry_id) WHERE reverses_entry_id IS NOT NULL;
