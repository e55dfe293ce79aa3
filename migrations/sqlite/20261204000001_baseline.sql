-- settle's schema on SQLite: the same tables and guarantees as on PostgreSQL, with SQLite's
-- mechanisms. `migrations/schema/sqlite.txt` describes what it makes (the snapshot test compares
-- them, and the parity test compares its tables with PostgreSQL's); a change to the schema is a
-- new migration after this one.
-- Timestamps are RFC 3339 text written by settle (always UTC, so they sort as they compare).
-- Journal amounts are kept twice: `amount` as the exact decimal text, `amount_minor` as the same
-- value in the currency's minor units, an integer SQLite can sum exactly.

CREATE TABLE settlement_events (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    source            TEXT NOT NULL,
    external_id       TEXT NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('recorded', 'posted', 'abandoned', 'discarded')),
    kind              TEXT,
    movement_id       TEXT,
    fingerprint       TEXT NOT NULL CHECK (length(fingerprint) = 64),
    facts             TEXT CHECK (facts IS NULL OR json_valid(facts)),
    validation_error  TEXT,
    payload           TEXT NOT NULL,
    job_id            TEXT NOT NULL,
    posted_entry_id   INTEGER REFERENCES journal_entries (id),
    received_at       TEXT NOT NULL,
    status_changed_at TEXT NOT NULL,
    CONSTRAINT settlement_events_natural_key UNIQUE (source, external_id),
    CHECK ((facts IS NULL) <> (validation_error IS NULL))
);

CREATE INDEX settlement_events_recorded ON settlement_events (received_at) WHERE status = 'recorded';
CREATE INDEX settlement_events_job ON settlement_events (job_id);

CREATE TRIGGER settlement_events_no_delete BEFORE DELETE ON settlement_events
BEGIN
    SELECT RAISE(ABORT, 'settlement_events are never deleted');
END;

CREATE TRIGGER settlement_events_immutable BEFORE UPDATE ON settlement_events
WHEN NEW.id IS NOT OLD.id OR NEW.source IS NOT OLD.source OR NEW.external_id IS NOT OLD.external_id
  OR NEW.kind IS NOT OLD.kind OR NEW.movement_id IS NOT OLD.movement_id
  OR NEW.fingerprint IS NOT OLD.fingerprint OR NEW.facts IS NOT OLD.facts
  OR NEW.validation_error IS NOT OLD.validation_error OR NEW.payload IS NOT OLD.payload
  OR NEW.received_at IS NOT OLD.received_at
  OR (OLD.posted_entry_id IS NOT NULL AND NEW.posted_entry_id IS NOT OLD.posted_entry_id)
BEGIN
    SELECT RAISE(ABORT, 'a received settlement event is immutable');
END;

CREATE TABLE event_conflicts (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id          INTEGER NOT NULL REFERENCES settlement_events (id),
    fingerprint       TEXT NOT NULL CHECK (length(fingerprint) = 64),
    facts             TEXT CHECK (facts IS NULL OR json_valid(facts)),
    validation_error  TEXT,
    payload           TEXT NOT NULL,
    deliveries        INTEGER NOT NULL DEFAULT 1 CHECK (deliveries > 0),
    first_seen_at     TEXT NOT NULL,
    last_seen_at      TEXT NOT NULL,
    state             TEXT NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'resolved')),
    resolved_at       TEXT,
    resolved_by       TEXT,
    resolution_reason TEXT,
    CONSTRAINT event_conflicts_one_per_fingerprint UNIQUE (event_id, fingerprint),
    CHECK ((facts IS NULL) <> (validation_error IS NULL)),
    CHECK ((state = 'open') = (resolved_at IS NULL))
);

CREATE INDEX event_conflicts_open ON event_conflicts (id) WHERE state = 'open';

CREATE TABLE journal_entries (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    -- The money movement's identity (one entry each); see the PostgreSQL baseline.
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
    -- What the provider reported about a movement its API reports; null for an entry posted
    -- from a webhook's own facts.
    details             TEXT CHECK (details IS NULL OR json_valid(details)),
    CONSTRAINT journal_entries_source_key UNIQUE (source_key)
);

-- An entry posted from a webhook's own facts is its event's only entry; a payout entry is
-- reversed at most once.
CREATE UNIQUE INDEX journal_entries_one_per_event ON journal_entries (event_id) WHERE details IS NULL;
CREATE UNIQUE INDEX journal_entries_reversed_once ON journal_entries (reverses_entry_id)
    WHERE reverses_entry_id IS NOT NULL;
CREATE INDEX journal_entries_effective ON journal_entries (effective_date, id);
CREATE INDEX journal_entries_payout ON journal_entries (payout_id) WHERE payout_id IS NOT NULL;
CREATE INDEX journal_entries_recorded ON journal_entries (recorded_at);

-- Lines are written first (their entry is checked at commit: the foreign key is deferred), and
-- their entry last: inserting the entry checks it balances, and no line can join it after.
CREATE TABLE journal_lines (
    entry_id     INTEGER NOT NULL REFERENCES journal_entries (id) DEFERRABLE INITIALLY DEFERRED,
    line_no      INTEGER NOT NULL CHECK (line_no > 0),
    account      TEXT NOT NULL CHECK (account <> ''),
    currency     TEXT NOT NULL CHECK (length(currency) = 3),
    amount       TEXT NOT NULL,
    amount_minor INTEGER NOT NULL CHECK (amount_minor <> 0),
    PRIMARY KEY (entry_id, line_no)
);

CREATE INDEX journal_lines_account ON journal_lines (account, currency);

CREATE TRIGGER journal_lines_before_their_entry BEFORE INSERT ON journal_lines
WHEN EXISTS (SELECT 1 FROM journal_entries WHERE id = NEW.entry_id)
BEGIN
    SELECT RAISE(ABORT, 'the journal is append-only: lines cannot be added to a written entry');
END;

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
CREATE TRIGGER journal_lines_no_update BEFORE UPDATE ON journal_lines
BEGIN
    SELECT RAISE(ABORT, 'the journal is append-only: UPDATE on journal_lines is refused');
END;
CREATE TRIGGER journal_lines_no_delete BEFORE DELETE ON journal_lines
BEGIN
    SELECT RAISE(ABORT, 'the journal is append-only: DELETE on journal_lines is refused');
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

CREATE TABLE job_attempts (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id    INTEGER NOT NULL REFERENCES settlement_events (id),
    job_id      TEXT NOT NULL,
    attempt     INTEGER NOT NULL CHECK (attempt > 0),
    worker      TEXT NOT NULL,
    started_at  TEXT NOT NULL,
    finished_at TEXT,
    error_code  TEXT,
    outcome     TEXT CHECK (outcome IN ('posted', 'settled', 'transient', 'permanent', 'died')),
    error       TEXT,
    CONSTRAINT job_attempts_numbered UNIQUE (job_id, attempt),
    CHECK ((finished_at IS NULL) = (outcome IS NULL))
);

CREATE INDEX job_attempts_event ON job_attempts (event_id, id);

CREATE TABLE dead_letters (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        INTEGER NOT NULL REFERENCES settlement_events (id),
    job_id          TEXT NOT NULL,
    state           TEXT NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'requeued', 'discarded')),
    error_class     TEXT NOT NULL CHECK (error_class IN ('permanent', 'exhausted')),
    error_code      TEXT NOT NULL,
    last_error      TEXT NOT NULL,
    attempts        INTEGER NOT NULL,
    abandoned_at    TEXT NOT NULL,
    decided_at      TEXT,
    decided_by      TEXT,
    decision_reason TEXT,
    requeued_job_id TEXT,
    CHECK ((state = 'open') = (decided_at IS NULL)),
    CHECK ((state = 'open') = (decided_by IS NULL))
);

CREATE UNIQUE INDEX dead_letters_one_open_per_event ON dead_letters (event_id) WHERE state = 'open';
CREATE INDEX dead_letters_state ON dead_letters (state, id);
CREATE INDEX dead_letters_abandoned ON dead_letters (abandoned_at);

CREATE TABLE audit_log (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    at           TEXT NOT NULL,
    actor        TEXT NOT NULL CHECK (actor <> ''),
    action       TEXT NOT NULL,
    reason       TEXT NOT NULL,
    subject_type TEXT NOT NULL CHECK (subject_type IN ('dead_letter', 'conflict')),
    subject_id   INTEGER NOT NULL,
    event_id     INTEGER REFERENCES settlement_events (id),
    before_state TEXT NOT NULL,
    after_state  TEXT NOT NULL,
    details      TEXT NOT NULL DEFAULT '{}'
);

CREATE INDEX audit_log_subject ON audit_log (subject_type, subject_id, id);
CREATE INDEX audit_log_event ON audit_log (event_id, id);

CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'the audit log is append-only: UPDATE refused');
END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'the audit log is append-only: DELETE refused');
END;

-- A PostSettlement job's payload must be JSON, or every worker that fetched it would stop on
-- decoding it (a JSON payload of the wrong shape is decoded as unreadable and dead-lettered).
CREATE TRIGGER settle_post_settlement_payload_is_json BEFORE INSERT ON Jobs
WHEN NEW.job_type = 'settle::PostSettlement' AND NOT json_valid(CAST(NEW.job AS TEXT))
BEGIN
    SELECT RAISE(ABORT, 'a PostSettlement job payload must be JSON');
END;
