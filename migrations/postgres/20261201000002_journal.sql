-- The journal: immutable, balanced double-entry entries. Corrections are reversal entries.

CREATE TABLE journal_entries (
    id                  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The provider's money-movement identity: {source}/{kind}/{movement_id}. One entry each.
    source_key          TEXT NOT NULL,
    -- The event whose job wrote this entry (one entry per event at most).
    event_id            BIGINT NOT NULL REFERENCES settlement_events (id),
    source              TEXT NOT NULL,
    kind                TEXT NOT NULL,
    movement_id         TEXT NOT NULL,
    payout_id           TEXT,
    reference           TEXT,
    -- The financial fingerprint of the facts this entry was built from; a replay of the same
    -- source key must carry the same one.
    request_fingerprint TEXT NOT NULL CHECK (request_fingerprint ~ '^[0-9a-f]{64}$'),
    effective_date      DATE NOT NULL,
    description         TEXT NOT NULL,
    reverses_entry_id   BIGINT REFERENCES journal_entries (id),
    recorded_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT journal_entries_source_key UNIQUE (source_key),
    CONSTRAINT journal_entries_one_per_event UNIQUE (event_id),
    CONSTRAINT journal_entries_reversed_once UNIQUE (reverses_entry_id)
);

CREATE INDEX journal_entries_effective ON journal_entries (effective_date, id);
CREATE INDEX journal_entries_payout ON journal_entries (payout_id) WHERE payout_id IS NOT NULL;

-- Signed amounts: debit positive, credit negative.
CREATE TABLE journal_lines (
    entry_id BIGINT NOT NULL REFERENCES journal_entries (id),
    line_no  INTEGER NOT NULL CHECK (line_no > 0),
    account  TEXT NOT NULL CHECK (account <> ''),
    currency TEXT NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    amount   NUMERIC(38, 10) NOT NULL CHECK (amount <> 0),
    PRIMARY KEY (entry_id, line_no)
);

CREATE INDEX journal_lines_account ON journal_lines (account, currency);

-- Immutability: no UPDATE, DELETE or TRUNCATE, whoever asks.
CREATE FUNCTION journal_refuse_change() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'the journal is append-only: % on % is refused (post a reversal instead)',
        TG_OP, TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER journal_entries_immutable BEFORE UPDATE OR DELETE ON journal_entries
    FOR EACH ROW EXECUTE FUNCTION journal_refuse_change();
CREATE TRIGGER journal_entries_no_truncate BEFORE TRUNCATE ON journal_entries
    FOR EACH STATEMENT EXECUTE FUNCTION journal_refuse_change();
CREATE TRIGGER journal_lines_immutable BEFORE UPDATE OR DELETE ON journal_lines
    FOR EACH ROW EXECUTE FUNCTION journal_refuse_change();
CREATE TRIGGER journal_lines_no_truncate BEFORE TRUNCATE ON journal_lines
    FOR EACH STATEMENT EXECUTE FUNCTION journal_refuse_change();

-- Balance: checked at commit, so the entry and all its lines are in place. Every entry has at
-- least two lines and sums to zero in every currency.
CREATE FUNCTION journal_assert_balanced(entry BIGINT) RETURNS void AS $$
DECLARE
    line_count INTEGER;
    unbalanced TEXT;
BEGIN
    SELECT count(*) INTO line_count FROM journal_lines WHERE entry_id = entry;
    IF line_count < 2 THEN
        RAISE EXCEPTION 'journal entry % has % line(s); an entry needs at least two', entry, line_count
            USING ERRCODE = 'check_violation';
    END IF;
    SELECT string_agg(currency || ' ' || total::text, ', ') INTO unbalanced
    FROM (SELECT currency, sum(amount) AS total FROM journal_lines
          WHERE entry_id = entry GROUP BY currency HAVING sum(amount) <> 0) AS off;
    IF unbalanced IS NOT NULL THEN
        RAISE EXCEPTION 'journal entry % does not balance: %', entry, unbalanced
            USING ERRCODE = 'check_violation';
    END IF;
END;
$$ LANGUAGE plpgsql;

CREATE FUNCTION journal_entries_check_balanced() RETURNS trigger AS $$
BEGIN
    PERFORM journal_assert_balanced(NEW.id);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE FUNCTION journal_lines_check_balanced() RETURNS trigger AS $$
BEGIN
    PERFORM journal_assert_balanced(NEW.entry_id);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE CONSTRAINT TRIGGER journal_entries_balanced AFTER INSERT ON journal_entries
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION journal_entries_check_balanced();
CREATE CONSTRAINT TRIGGER journal_lines_balanced AFTER INSERT ON journal_lines
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION journal_lines_check_balanced();

-- An event points at the entry that settles it (its own, or the one an earlier event of the
-- same movement wrote). Set once, when the event is posted.
ALTER TABLE settlement_events ADD COLUMN posted_entry_id BIGINT REFERENCES journal_entries (id);

CREATE OR REPLACE FUNCTION settlement_events_guard() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'settlement_events are never deleted (event %)', OLD.id
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF (NEW.id, NEW.source, NEW.external_id, NEW.kind, NEW.movement_id, NEW.fingerprint,
        NEW.facts, NEW.validation_error, NEW.payload, NEW.received_at)
       IS DISTINCT FROM
       (OLD.id, OLD.source, OLD.external_id, OLD.kind, OLD.movement_id, OLD.fingerprint,
        OLD.facts, OLD.validation_error, OLD.payload, OLD.received_at)
       OR (OLD.posted_entry_id IS NOT NULL AND NEW.posted_entry_id IS DISTINCT FROM OLD.posted_entry_id) THEN
        RAISE EXCEPTION 'a received settlement event is immutable (event %)', OLD.id
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

-- Every attempt a worker starts, committed before the work begins, so a worker that dies
-- mid-job leaves a started attempt with no finish: that is how a rescue is told apart from a
-- job that was fetched but never started, and how a job that kills its worker is bounded.
CREATE TABLE job_attempts (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id    BIGINT NOT NULL REFERENCES settlement_events (id),
    job_id      TEXT NOT NULL,
    attempt     INTEGER NOT NULL CHECK (attempt > 0),
    worker      TEXT NOT NULL,
    started_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at TIMESTAMPTZ,
    error_code  TEXT,
    outcome     TEXT CHECK (outcome IN ('posted', 'settled', 'transient', 'permanent', 'died')),
    error       TEXT,
    CONSTRAINT job_attempts_numbered UNIQUE (job_id, attempt),
    CONSTRAINT job_attempts_finished CHECK ((finished_at IS NULL) = (outcome IS NULL))
);

CREATE INDEX job_attempts_event ON job_attempts (event_id, id);

-- The dead letter: events whose job failed permanently or ran out of attempts. Nothing in the
-- system retries them by itself; a person requeues or discards them.
CREATE TABLE dead_letters (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id     BIGINT NOT NULL REFERENCES settlement_events (id),
    job_id       TEXT NOT NULL,
    state        TEXT NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'requeued', 'discarded')),
    -- permanent: it cannot succeed as it is; exhausted: transient failures ran out of attempts.
    error_class  TEXT NOT NULL CHECK (error_class IN ('permanent', 'exhausted')),
    -- What failed, as a stable code (invalid_facts, source_replay_conflict, ...).
    error_code   TEXT NOT NULL,
    last_error   TEXT NOT NULL,
    attempts     INTEGER NOT NULL,
    abandoned_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    decided_at   TIMESTAMPTZ,
    CONSTRAINT dead_letters_decided CHECK ((state = 'open') = (decided_at IS NULL))
);

CREATE UNIQUE INDEX dead_letters_one_open_per_event ON dead_letters (event_id) WHERE state = 'open';
CREATE INDEX dead_letters_state ON dead_letters (state, id);

-- A PostSettlement job's payload must be JSON, or every worker that fetched it would stop on
-- decoding it. (A JSON payload of the wrong shape is decoded as unreadable and dead-lettered.)
-- The cast raises on anything that is not UTF-8 JSON, refusing the insert.
ALTER TABLE apalis.jobs ADD CONSTRAINT settle_post_settlement_payload_is_json CHECK (
    CASE WHEN job_type = 'settle::PostSettlement'
         THEN convert_from(job, 'UTF8')::json IS NOT NULL
         ELSE true END
);
