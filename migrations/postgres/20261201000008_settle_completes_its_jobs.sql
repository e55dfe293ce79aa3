-- settle writes how each of its jobs ended, in the transaction that decided it (apalis is told
-- nothing): a job that settled its event has its queue row deleted there, a job that will not
-- run again is 'Killed', a job to run again later is 'Pending' with a later run_at. Starting an
-- attempt decides three of those: a job whose event no longer waits for it is done (row
-- deleted), a job naming no event and a job out of attempts are killed. Otherwise as in
-- migration 6.
CREATE OR REPLACE FUNCTION settle_start_attempt(
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
$$ LANGUAGE plpgsql;

-- Finished rows left by earlier versions (apalis marked them 'Done'; a pruning loop deleted
-- them): nothing reads them.
DELETE FROM apalis.jobs WHERE job_type = 'settle::PostSettlement' AND status = 'Done';
