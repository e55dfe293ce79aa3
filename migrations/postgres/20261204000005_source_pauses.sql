-- Pausing a source: its deliveries are still verified, recorded and acknowledged, but no attempt
-- of its events starts while it is paused. One row per pause, kept for ever: who paused it, when
-- and why, and once resumed who resumed it, when and why (the pause's audit trail). A row
-- changes once, when it is resumed; nothing else about it ever changes, and none is deleted.

CREATE TABLE source_pauses (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source        TEXT NOT NULL,
    paused_at     TIMESTAMPTZ NOT NULL,
    paused_by     TEXT NOT NULL CHECK (paused_by <> ''),
    pause_reason  TEXT NOT NULL CHECK (pause_reason <> ''),
    resumed_at    TIMESTAMPTZ,
    resumed_by    TEXT CHECK (resumed_by <> ''),
    resume_reason TEXT CHECK (resume_reason <> ''),
    CONSTRAINT source_pauses_resumed CHECK (
        (resumed_at IS NULL) = (resumed_by IS NULL) AND (resumed_at IS NULL) = (resume_reason IS NULL))
);

-- At most one pause of a source is in force; the start rule probes it.
CREATE UNIQUE INDEX source_pauses_in_force ON source_pauses (source) WHERE resumed_at IS NULL;

CREATE FUNCTION source_pauses_guard() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' OR OLD.resumed_at IS NOT NULL
       OR (NEW.id, NEW.source, NEW.paused_at, NEW.paused_by, NEW.pause_reason)
          IS DISTINCT FROM (OLD.id, OLD.source, OLD.paused_at, OLD.paused_by, OLD.pause_reason) THEN
        RAISE EXCEPTION 'a source pause is only ever resumed, once: % refused', TG_OP
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER source_pauses_guard BEFORE UPDATE OR DELETE ON source_pauses
    FOR EACH ROW EXECUTE FUNCTION source_pauses_guard();
CREATE FUNCTION source_pauses_refuse_truncate() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'source pauses are never deleted (TRUNCATE refused)'
        USING ERRCODE = 'restrict_violation';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER source_pauses_no_truncate BEFORE TRUNCATE ON source_pauses
    FOR EACH STATEMENT EXECUTE FUNCTION source_pauses_refuse_truncate();

-- The start rule, with the pause: a job whose event waits for it but whose source is paused
-- starts nothing and answers 'paused' (the caller hands it back for later; resuming makes it due
-- at once). Otherwise as before.
CREATE OR REPLACE FUNCTION settle_start_attempt(
    event BIGINT, job TEXT, worker TEXT, attempts_max INTEGER, lock_timeout TEXT, died_error TEXT,
    alone BOOLEAN
) RETURNS TABLE (outcome TEXT, attempt INTEGER) AS $$
DECLARE
    current_status TEXT;
    current_job TEXT;
    current_source TEXT;
    died INTEGER;
    started INTEGER;
    last_code TEXT;
    last_error TEXT;
    last_outcome TEXT;
BEGIN
    PERFORM set_config('lock_timeout', lock_timeout, true);
    SELECT e.status, e.job_id, e.source INTO current_status, current_job, current_source
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
    IF EXISTS (SELECT 1 FROM source_pauses p WHERE p.source = current_source AND p.resumed_at IS NULL) THEN
        RETURN QUERY SELECT 'paused'::text, 0;
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
CREATE OR REPLACE FUNCTION settle_start_attempts(
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
      AND NOT EXISTS (SELECT 1 FROM job_attempts a WHERE a.job_id = i.job)
      AND NOT EXISTS (SELECT 1 FROM source_pauses p WHERE p.source = e.source AND p.resumed_at IS NULL);
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

