-- no-transaction
-- Movements a provider's API reports (a Stripe balance transaction) post one entry each, keyed
-- by the movement alone, whichever event reached it: one event may post several (a payout's
-- listing) and several events may reach one entry. Such an entry keeps what the provider
-- reported in `details`; an entry posted from a webhook's own facts (details IS NULL) is still
-- its event's only entry. SQLite cannot drop a table constraint, so journal_entries is rebuilt
-- the way SQLite documents (foreign keys off, a new table, the rows copied, renamed, its indexes
-- and triggers made again), in one transaction.
PRAGMA foreign_keys = OFF;
PRAGMA legacy_alter_table = ON;
BEGIN IMMEDIATE;

CREATE TABLE journal_entries_rebuilt (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    source_key          TEXT NOT NULL,
    event_id            INTEGER NOT NULL REFERENCES settlement_events (id),
    source              TEXT NOT NULL,
    kind                TEXT NOT NULL,
    movement_id         TEXT NOT NULL,
    payout_id           TEXT,
    reference           TEXT,
    request_fingerprint TEXT NOT NULL CHECK (length(request_fingerprint) = 64),
    effective_date      TEXT NOT NULL,
    description         TEXT NOT NULL,
    reverses_entry_id   INTEGER REFERENCES journal_entries (id),
    recorded_at         TEXT NOT NULL,
    details             TEXT CHECK (details IS NULL OR json_valid(details)),
    CONSTRAINT journal_entries_source_key UNIQUE (source_key),
    CONSTRAINT journal_entries_reversed_once UNIQUE (reverses_entry_id)
);

INSERT INTO journal_entries_rebuilt (id, source_key, event_id, source, kind, movement_id, payout_id,
                                     reference, request_fingerprint, effective_date, description,
                                     reverses_entry_id, recorded_at, details)
SELECT id, source_key, event_id, source, kind, movement_id, payout_id, reference,
       request_fingerprint, effective_date, description, reverses_entry_id, recorded_at, NULL
FROM journal_entries ORDER BY id;

DROP TABLE journal_entries;
ALTER TABLE journal_entries_rebuilt RENAME TO journal_entries;

CREATE UNIQUE INDEX journal_entries_one_per_event ON journal_entries (event_id) WHERE details IS NULL;
CREATE INDEX journal_entries_effective ON journal_entries (effective_date, id);
CREATE INDEX journal_entries_payout ON journal_entries (payout_id) WHERE payout_id IS NOT NULL;
CREATE INDEX journal_entries_recorded ON journal_entries (recorded_at);

CREATE TRIGGER journal_entries_balanced AFTER INSERT ON journal_entries
WHEN (SELECT count(*) FROM journal_lines WHERE entry_id = NEW.id) < 2
  OR EXISTS (SELECT 1 FROM journal_lines WHERE entry_id = NEW.id GROUP BY currency HAVING sum(amount_minor) <> 0)
BEGIN
    SELECT RAISE(ABORT, 'journal entry does not balance (or has fewer than two lines)');
END;
CREATE TRIGGER journal_entries_no_update BEFORE UPDATE ON journal_entries
BEGIN
    SELECT RAISE(ABORT, 'the journal is append-only: UPDATE on journal_entries is refused');
END;
CREATE TRIGGER journal_entries_no_delete BEFORE DELETE ON journal_entries
BEGIN
    SELECT RAISE(ABORT, 'the journal is append-only: DELETE on journal_entries is refused');
END;

-- The entries a payout paid out, as the provider lists them (Stripe: the balance transactions
-- of an automatic payout). An entry is paid out by one payout at most. Never changed.
CREATE TABLE payout_items (
    entry_id  INTEGER PRIMARY KEY REFERENCES journal_entries (id),
    source    TEXT NOT NULL,
    payout_id TEXT NOT NULL,
    event_id  INTEGER NOT NULL REFERENCES settlement_events (id),
    tied_at   TEXT NOT NULL
);

CREATE INDEX payout_items_payout ON payout_items (payout_id);

CREATE TRIGGER payout_items_no_update BEFORE UPDATE ON payout_items
BEGIN
    SELECT RAISE(ABORT, 'payout items are append-only: UPDATE refused');
END;
CREATE TRIGGER payout_items_no_delete BEFORE DELETE ON payout_items
BEGIN
    SELECT RAISE(ABORT, 'payout items are append-only: DELETE refused');
END;

COMMIT;
PRAGMA legacy_alter_table = OFF;
PRAGMA foreign_keys = ON;
