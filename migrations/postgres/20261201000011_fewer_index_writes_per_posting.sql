-- Fewer index writes per posting.
-- A payout entry is reversed at most once: only reversals need the unique index (a unique
-- constraint also indexed the NULL of every other entry). Same name, so a second reversal still
-- violates `journal_entries_reversed_once`.
ALTER TABLE journal_entries DROP CONSTRAINT journal_entries_reversed_once;
CREATE UNIQUE INDEX journal_entries_reversed_once ON journal_entries (reverses_entry_id)
    WHERE reverses_entry_id IS NOT NULL;

-- An attempt row is written when the attempt starts and updated once when it ends, in columns no
-- index covers: with room left on its page the update is a heap-only tuple (no index entries).
ALTER TABLE job_attempts SET (fillfactor = 50);
