-- settle's schema on PostgreSQL. `migrations/schema/postgres.txt` describes what it makes (the
-- snapshot test compares them); a change to the schema is a new migration after this one.

------------------------------------------------------------------------------------------------
-- Settlement events: one row per provider event, by natural key (source, external_id). Written
-- once by the ingress; afterwards only its status, its current job and the entry that settled it
-- change.

CREATE TABLE settlement_events (
    id                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source            TEXT NOT NULL,
    external_id       TEXT NOT NULL,
    status            TEXT NOT NULL
                      CHECK (status IN ('recorded', 'posted', 'abandoned', 'discarded')),
    -- The kind as delivered (null when the delivery named none); the movement id when valid.
    kind              TEXT,
    movement_id       TEXT,
    fingerprint       TEXT NOT NULL CHECK (fingerprint ~ '^[0-9a-f]{64}$'),
    -- Canonical facts when valid, else the validation error: exactly one of the two.
    facts             JSONB,
    validation_error  TEXT,
    -- This event's part of the delivery, as received.
    payload           TEXT NOT NULL,
    -- The event's current job (apalis.jobs.id). A requeue points it at a fresh job.
    job_id            TEXT NOT NULL,
    -- The entry that settles it (its own, or the one an earlier event of the same movement
    -- wrote). Set once, when the event is posted.
    posted_entry_id   BIGINT,
    received_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    status_changed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT settlement_events_natural_key UNIQUE (source, external_id),
    CONSTRAINT settlement_events_facts_xor_error CHECK ((facts IS NULL) <> (validation_error IS NULL))
);

CREATE INDEX settlement_events_recorded ON settlement_events (received_at) WHERE status = 'recorded';
CREATE INDEX settlement_events_job ON settlement_events (job_id);

-- What was received never changes and is never deleted: only status, job and their time move,
-- and the settling entry is set once.
CREATE FUNCTION settlement_events_guard() RETURNS trigger AS $$
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

CREATE TRIGGER settlement_events_guard
    BEFORE UPDATE OR DELETE ON settlement_events
    FOR EACH ROW EXECUTE FUNCTION settlement_events_guard();

CREATE FUNCTION settlement_events_refuse_truncate() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'settlement_events are never deleted (TRUNCATE refused)'
        USING ERRCODE = 'restrict_violation';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER settlement_events_no_truncate
    BEFORE TRUNCATE ON settlement_events
    FOR EACH STATEMENT EXECUTE FUNCTION settlement_events_refuse_truncate();

-- Deliveries that reused an event's key with different facts: kept for a person, one row per
-- distinct conflicting fingerprint (identical redeliveries only bump the counter).
CREATE TABLE event_conflicts (
    id                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id          BIGINT NOT NULL REFERENCES settlement_events (id),
    fingerprint       TEXT NOT NULL CHECK (fingerprint ~ '^[0-9a-f]{64}$'),
    facts             JSONB,
    validation_error  TEXT,
    payload           TEXT NOT NULL,
    deliveries        INTEGER NOT NULL DEFAULT 1 CHECK (deliveries > 0),
    first_seen_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_seen_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    state             TEXT NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'resolved')),
    resolved_at       TIMESTAMPTZ,
    resolved_by       TEXT,
    resolution_reason TEXT,
    CONSTRAINT event_conflicts_one_per_fingerprint UNIQUE (event_id, fingerprint),
    CONSTRAINT event_conflicts_facts_xor_error CHECK ((facts IS NULL) <> (validation_error IS NULL)),
    CONSTRAINT event_conflicts_resolved CHECK ((state = 'open') = (resolved_at IS NULL))
);

CREATE INDEX event_conflicts_open ON event_conflicts (id) WHERE state = 'open';

------------------------------------------------------------------------------------------------
-- The journal: immutable, balanced double-entry entries. Corrections are reversal entries.

CREATE TABLE journal_entries (
    id                  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The money movement's identity: {source}/{kind}/{movement_id} for a webhook's own facts,
    -- the provider's movement for one its API reports. One entry each.
    source_key          TEXT NOT NULL,
    -- The event whose job wrote this entry.
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
    -- Taken when the entry row is written (late in the posting transaction, just before its
    -- commit) rather than when the transaction began, so "as recorded at T" reports line up with
    -- commits as closely as the database allows.
    recorded_at         TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    -- What the provider reported about a movement its API reports (a Stripe balance
    -- transaction); null for an entry posted from a webhook's own facts.
    details             JSONB,
    CONSTRAINT journal_entries_source_key UNIQUE (source_key)
);

-- An entry posted from a webhook's own facts is its event's only entry; an entry of a movement
-- a provider's API reports is keyed by the movement alone (one event may post several, several
-- events may reach one).
CREATE UNIQUE INDEX journal_entries_one_per_event ON journal_entries (event_id) WHERE details IS NULL;
-- A payout entry is reversed at most once (only reversals are indexed).
CREATE UNIQUE INDEX journal_entries_reversed_once ON journal_entries (reverses_entry_id)
    WHERE reverses_entry_id IS NOT NULL;
CREATE INDEX journal_entries_effective ON journal_entries (effective_date, id);
CREATE INDEX journal_entries_payout ON journal_entries (payout_id) WHERE payout_id IS NOT NULL;
CREATE INDEX journal_entries_recorded ON journal_entries (recorded_at);

ALTER TABLE settlement_events
    ADD CONSTRAINT settlement_events_posted_entry_id_fkey
    FOREIGN KEY (posted_entry_id) REFERENCES journal_entries (id);

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

-- The entries a payout paid out, as the provider lists them (Stripe: the balance transactions
-- of an automatic payout). An entry is paid out by one payout at most. Written with the posting
-- of the event whose listing tied it; never changed.
CREATE TABLE payout_items (
    entry_id  BIGINT PRIMARY KEY REFERENCES journal_entries (id),
    source    TEXT NOT NULL,
    payout_id TEXT NOT NULL,
    -- The event whose payout listing tied the entry.
    event_id  BIGINT NOT NULL REFERENCES settlement_events (id),
    tied_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX payout_items_payout ON payout_items (payout_id);

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
CREATE TRIGGER payout_items_immutable BEFORE UPDATE OR DELETE ON payout_items
    FOR EACH ROW EXECUTE FUNCTION journal_refuse_change();
CREATE TRIGGER payout_items_no_truncate BEFORE TRUNCATE ON payout_items
    FOR EACH STATEMENT EXECUTE FUNCTION journal_refuse_change();

-- Balance: checked once per statement for all the entries it wrote. Every entry has at least two
-- lines and sums to zero per currency once the statement that wrote it ends: an entry and its
-- lines are written by one statement (the posting writes both in one), and lines added to an
-- existing entry are checked with it.
CREATE FUNCTION journal_assert_entries_balanced(entries BIGINT[]) RETURNS void AS $$
DECLARE
    entry BIGINT;
    line_count BIGINT;
    unbalanced TEXT;
BEGIN
    SELECT e.id, coalesce(c.lines, 0), c.unbalanced INTO entry, line_count, unbalanced
    FROM unnest(entries) AS e(id)
    LEFT JOIN LATERAL (
        SELECT sum(per_currency.lines) AS lines,
               string_agg(per_currency.currency || ' ' || per_currency.total::text, ', ')
                   FILTER (WHERE per_currency.total <> 0) AS unbalanced
        FROM (SELECT l.currency, count(*) AS lines, sum(l.amount) AS total FROM journal_lines l
              WHERE l.entry_id = e.id GROUP BY l.currency) AS per_currency
    ) AS c ON true
    WHERE coalesce(c.lines, 0) < 2 OR c.unbalanced IS NOT NULL
    LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF line_count < 2 THEN
        RAISE EXCEPTION 'journal entry % has % line(s); an entry needs at least two', entry, line_count
            USING ERRCODE = 'check_violation';
    END IF;
    RAISE EXCEPTION 'journal entry % does not balance: %', entry, unbalanced
        USING ERRCODE = 'check_violation';
END;
$$ LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan;

CREATE FUNCTION journal_entries_check_balanced() RETURNS trigger AS $$
BEGIN
    PERFORM journal_assert_entries_balanced(ARRAY(SELECT id FROM written_entries));
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE FUNCTION journal_lines_check_balanced() RETURNS trigger AS $$
BEGIN
    PERFORM journal_assert_entries_balanced(ARRAY(SELECT DISTINCT entry_id FROM written_lines));
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER journal_entries_balanced AFTER INSERT ON journal_entries
    REFERENCING NEW TABLE AS written_entries
    FOR EACH STATEMENT EXECUTE FUNCTION journal_entries_check_balanced();
CREATE TRIGGER journal_lines_balanced AFTER INSERT ON journal_lines
    REFERENCING NEW TABLE AS written_lines
    FOR EACH STATEMENT EXECUTE FUNCTION journal_lines_check_balanced();

------------------------------------------------------------------------------------------------
-- Jobs: attempts and the dead letter.

-- Every attempt a worker starts, committed before the work begins, so a worker that dies
-- mid-job leaves a started attempt with no finish: that is how a rescue is told apart from a
-- job that was fetched but never started, and how a job that kills its worker is bounded. The
-- row is written when the attempt starts and updated once when it ends, in columns no index
-- covers: with room left on its page (fillfactor 50) the update is a heap-only tuple.
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
) WITH (fillfactor = 50);

CREATE INDEX job_attempts_event ON job_attempts (event_id, id);

-- The dead letter: events whose job failed permanently or ran out of attempts. Nothing in the
-- system retries them by itself; a person requeues or discards them.
CREATE TABLE dead_letters (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        BIGINT NOT NULL REFERENCES settlement_events (id),
    job_id          TEXT NOT NULL,
    state           TEXT NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'requeued', 'discarded')),
    -- permanent: it cannot succeed as it is; exhausted: transient failures ran out of attempts.
    error_class     TEXT NOT NULL CHECK (error_class IN ('permanent', 'exhausted')),
    -- What failed, as a stable code (invalid_facts, source_replay_conflict, ...).
    error_code      TEXT NOT NULL,
    last_error      TEXT NOT NULL,
    attempts        INTEGER NOT NULL,
    abandoned_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    decided_at      TIMESTAMPTZ,
    decided_by      TEXT,
    decision_reason TEXT,
    -- The fresh job a requeue gave the event.
    requeued_job_id TEXT,
    CONSTRAINT dead_letters_decided CHECK ((state = 'open') = (decided_at IS NULL)),
    CONSTRAINT dead_letters_decided_by CHECK ((state = 'open') = (decided_by IS NULL))
);

CREATE UNIQUE INDEX dead_letters_one_open_per_event ON dead_letters (event_id) WHERE state = 'open';
CREATE INDEX dead_letters_state ON dead_letters (state, id);
CREATE INDEX dead_letters_abandoned ON dead_letters (abandoned_at);

------------------------------------------------------------------------------------------------
-- Ops: decisions on dead letters and conflicts, each recorded in an append-only audit log in the
-- same transaction as the decision.

CREATE TABLE audit_log (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    actor        TEXT NOT NULL CHECK (actor <> ''),
    action       TEXT NOT NULL,
    reason       TEXT NOT NULL,
    subject_type TEXT NOT NULL CHECK (subject_type IN ('dead_letter', 'conflict')),
    subject_id   BIGINT NOT NULL,
    event_id     BIGINT REFERENCES settlement_events (id),
    before_state TEXT NOT NULL,
    after_state  TEXT NOT NULL,
    details      JSONB NOT NULL DEFAULT '{}'
);

CREATE INDEX audit_log_subject ON audit_log (subject_type, subject_id, id);
CREATE INDEX audit_log_event ON audit_log (event_id, id);

CREATE FUNCTION audit_log_refuse_change() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only: % refused', TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER audit_log_immutable BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_refuse_change();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_refuse_change();

------------------------------------------------------------------------------------------------
-- Starting attempts, PostgreSQL's fast path of the start decision: one call, one round trip, one
-- commit. settle writes how each of its jobs ended in the transaction that decided it (apalis is
-- told nothing): a job whose event no longer waits for it is done (queue row deleted), a job
-- naming no event and a job out of attempts are killed. The labels written here are those of
-- the Rust enums (AttemptOutcome, ErrorClass, EventStatus); the tables' CHECK constraints refuse
-- anything else.

-- One job: lock the event; if it still waits for this job, close the job's unfinished attempts
-- as died, then either dead-letter the event (its recorded starts reached the limit), report a
-- rescue (an attempt died: the caller retries later without starting it now), report a suspect
-- (the last attempt died with its worker: it starts only when called with `alone`, once nothing
-- else of the worker's process is in flight), or record the next attempt's start.
-- Returns the outcome ('stray', 'nothing_to_do', 'exhausted', 'rescued', 'suspect', 'run') and
-- the attempt count.
CREATE FUNCTION settle_start_attempt(
    event BIGINT, job TEXT, worker TEXT, attempts_max INTEGER, lock_timeout TEXT, died_error TEXT,
    alone BOOLEAN
) RETURNS TABLE (outcome TEXT, attempt INTEGER) AS $$
DECLARE
    current_status TEXT;
    current_job TEXT;
    died INTEGER;
    started INTEGER;
    last_code TEXT;
    last_error TEXT;
    last_outcome TEXT;
BEGIN
    PERFORM set_config('lock_timeout', lock_timeout, true);
    SELECT e.status, e.job_id INTO current_status, current_job
    FROM settlement_events e WHERE e.id = event FOR UPDATE;
    IF NOT FOUND THEN
        UPDATE apalis.jobs q SET status = 'Killed', done_at = now() WHERE q.id = settle_start_attempt.job;
        RETURN QUERY SELECT 'stray'::text, 0;
        RETURN;
    END IF;
    IF current_status <> 'recorded' OR current_job <> job THEN
        DELETE FROM apalis.jobs q WHERE q.id = settle_start_attempt.job;
        RETURN QUERY SELECT 'nothing_to_do'::text, 0;
        RETURN;
    END IF;
    UPDATE job_attempts a
    SET finished_at = now(), outcome = 'died', error_code = 'worker_died', error = died_error
    WHERE a.job_id = job AND a.finished_at IS NULL;
    GET DIAGNOSTICS died = ROW_COUNT;
    -- The last attempt, read once: how many have started, and how the last one ended.
    SELECT a.attempt, a.outcome, a.error_code, a.error
    INTO started, last_outcome, last_code, last_error
    FROM job_attempts a WHERE a.job_id = job ORDER BY a.attempt DESC LIMIT 1;
    started := coalesce(started, 0);
    IF started >= attempts_max THEN
        INSERT INTO dead_letters (event_id, job_id, error_class, error_code, last_error, attempts)
        VALUES (event, job, 'exhausted', coalesce(last_code, 'attempts_exhausted'),
                coalesce(last_error, 'every attempt was used'), started);
        UPDATE settlement_events SET status = 'abandoned', status_changed_at = now()
        WHERE id = event AND status = 'recorded';
        UPDATE apalis.jobs q SET status = 'Killed', done_at = now() WHERE q.id = settle_start_attempt.job;
        RETURN QUERY SELECT 'exhausted'::text, started;
        RETURN;
    END IF;
    IF died > 0 THEN
        RETURN QUERY SELECT 'rescued'::text, started;
        RETURN;
    END IF;
    IF last_outcome = 'died' AND NOT alone THEN
        RETURN QUERY SELECT 'suspect'::text, started;
        RETURN;
    END IF;
    INSERT INTO job_attempts (event_id, job_id, attempt, worker) VALUES (event, job, started + 1, worker);
    RETURN QUERY SELECT 'run'::text, started + 1;
END;
$$ LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan;

-- A group's attempts: the common case, a job's first attempt on an event that still waits for
-- it, is done for the whole group by two set-based statements; every other job goes through
-- settle_start_attempt as if alone. Events are locked first, all at once, in id order, so two
-- groups never deadlock. Returns each job's position in the arrays (1-based) with its outcome.
CREATE FUNCTION settle_start_attempts(
    events BIGINT[], jobs TEXT[], workers TEXT[], attempts_max INTEGER, lock_timeout TEXT,
    died_error TEXT
) RETURNS TABLE (ord BIGINT, outcome TEXT, attempt INTEGER) AS $$
DECLARE
    fresh BIGINT[];
BEGIN
    PERFORM set_config('lock_timeout', lock_timeout, true);
    PERFORM 1 FROM settlement_events e WHERE e.id = ANY(events) ORDER BY e.id FOR UPDATE;
    SELECT coalesce(array_agg(i.ord), '{}') INTO fresh
    FROM unnest(events, jobs) WITH ORDINALITY AS i(event, job, ord)
    JOIN settlement_events e ON e.id = i.event
    WHERE e.status = 'recorded' AND e.job_id = i.job
      AND NOT EXISTS (SELECT 1 FROM job_attempts a WHERE a.job_id = i.job);
    INSERT INTO job_attempts (event_id, job_id, attempt, worker)
    SELECT i.event, i.job, 1, i.worker
    FROM unnest(events, jobs, workers) WITH ORDINALITY AS i(event, job, worker, ord)
    WHERE i.ord = ANY(fresh);
    RETURN QUERY SELECT f.ord, 'run'::text, 1 FROM unnest(fresh) AS f(ord);
    RETURN QUERY
    SELECT i.ord, s.outcome, s.attempt
    FROM unnest(events, jobs, workers) WITH ORDINALITY AS i(event, job, worker, ord)
    CROSS JOIN LATERAL settle_start_attempt(i.event, i.job, i.worker, attempts_max, lock_timeout,
                                            died_error, false) AS s
    WHERE NOT (i.ord = ANY(fresh));
END;
$$ LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan;

------------------------------------------------------------------------------------------------
-- The queue (apalis-postgres' own tables, migrated before this file).

-- A PostSettlement job's payload must be JSON, or every worker that fetched it would stop on
-- decoding it. (A JSON payload of the wrong shape is decoded as unreadable and dead-lettered.)
-- The cast raises on anything that is not UTF-8 JSON, refusing the insert.
ALTER TABLE apalis.jobs ADD CONSTRAINT settle_post_settlement_payload_is_json CHECK (
    CASE WHEN job_type = 'settle::PostSettlement'
         THEN convert_from(job, 'UTF8')::json IS NOT NULL
         ELSE true END
);

-- Two indexes that duplicate others: unique_job_id (the primary key's column) and lidx
-- (idx_apalis_jobs_lock_by's). Every enqueue and every fetch (which changes lock_by) wrote an
-- entry into each of them.
DROP INDEX IF EXISTS apalis.unique_job_id;
DROP INDEX IF EXISTS apalis.lidx;

-- apalis.get_jobs is a SQL function, so its UPDATE ... FROM (the batch it just picked) is
-- planned generically: the planner takes LIMIT v_job_count for a tenth of the queue and
-- hash-joins the batch against a sequential scan of the whole apalis.jobs table, a cost that
-- grows with the backlog. With hash and merge joins off inside the function the batch is joined
-- by the primary key, whatever the backlog. `tests::suite::queue` checks the settings are still
-- in force.
ALTER FUNCTION apalis.get_jobs(TEXT, TEXT, INTEGER) SET enable_hashjoin = off;
ALTER FUNCTION apalis.get_jobs(TEXT, TEXT, INTEGER) SET enable_mergejoin = off;

------------------------------------------------------------------------------------------------
-- Plans and autovacuum.

-- Statements that run in every job are planned for the tables as they are when they run: a
-- cached generic plan is made once per connection, while a drain's tables are still small, and a
-- sequential scan chosen for a nearly empty table would run on every call over every row posted
-- since (BENCHMARKS.md, "The drain collapse"). The posting transaction sets this for itself; the
-- functions above set it for their calls, and so does the queue's fetch.
ALTER FUNCTION apalis.get_jobs(TEXT, TEXT, INTEGER) SET plan_cache_mode = force_custom_plan;

-- Autovacuum for the tables every job rewrites, as job queues recommend for theirs: vacuum and
-- analyze after a small share of changes rather than PostgreSQL's default 20 % / 10 %, so dead
-- rows (a posted job's deleted queue row, an event's old status, an attempt's open row) are
-- cleaned and statistics follow a backlog as it drains.
ALTER TABLE apalis.jobs SET (
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);
ALTER TABLE settlement_events SET (
    autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 1000
);
ALTER TABLE job_attempts SET (
    autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 1000
);
-- The journal is append-only: analyzed as it grows, vacuumed (for visibility) after inserts.
ALTER TABLE journal_entries SET (
    autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05
);
ALTER TABLE journal_lines SET (
    autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05
);
