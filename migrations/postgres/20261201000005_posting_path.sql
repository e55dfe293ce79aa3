-- The posting path in fewer round trips and fewer queries; same rules as before.

-- The balance check reads an entry's lines once (it ran two queries per call, and it is called
-- once per entry and once per line at commit).
CREATE OR REPLACE FUNCTION journal_assert_balanced(entry BIGINT) RETURNS void AS $$
DECLARE
    line_count INTEGER;
    unbalanced TEXT;
BEGIN
    SELECT coalesce(sum(lines), 0),
           string_agg(currency || ' ' || total::text, ', ') FILTER (WHERE total <> 0)
    INTO line_count, unbalanced
    FROM (SELECT currency, count(*) AS lines, sum(amount) AS total FROM journal_lines
          WHERE entry_id = entry GROUP BY currency) AS per_currency;
    IF line_count < 2 THEN
        RAISE EXCEPTION 'journal entry % has % line(s); an entry needs at least two', entry, line_count
            USING ERRCODE = 'check_violation';
    END IF;
    IF unbalanced IS NOT NULL THEN
        RAISE EXCEPTION 'journal entry % does not balance: %', entry, unbalanced
            USING ERRCODE = 'check_violation';
    END IF;
END;
$$ LANGUAGE plpgsql;

-- Starting an attempt, in one call (one round trip, one commit): lock the event; if it still
-- waits for this job, close the job's unfinished attempts as died, then either dead-letter the
-- event (its recorded starts reached the limit), report a rescue (an attempt died: the caller
-- retries it later without starting it now), or record the next attempt's start.
-- Returns the outcome ('stray', 'nothing_to_do', 'exhausted', 'rescued', 'run') and the attempt
-- count. The labels written here are those of jobs::job (AttemptOutcome, ErrorClass) and
-- jobs::record (EventStatus); the tables' CHECK constraints refuse anything else.
CREATE FUNCTION settle_start_attempt(
    event BIGINT, job TEXT, worker TEXT, attempts_max INTEGER, lock_timeout TEXT, died_error TEXT
) RETURNS TABLE (outcome TEXT, attempt INTEGER) AS $$
DECLARE
    current_status TEXT;
    current_job TEXT;
    died INTEGER;
    started INTEGER;
    last_code TEXT;
    last_error TEXT;
BEGIN
    PERFORM set_config('lock_timeout', lock_timeout, true);
    SELECT e.status, e.job_id INTO current_status, current_job
    FROM settlement_events e WHERE e.id = event FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'stray'::text, 0;
        RETURN;
    END IF;
    IF current_status <> 'recorded' OR current_job <> job THEN
        RETURN QUERY SELECT 'nothing_to_do'::text, 0;
        RETURN;
    END IF;
    UPDATE job_attempts a
    SET finished_at = now(), outcome = 'died', error_code = 'worker_died', error = died_error
    WHERE a.job_id = job AND a.finished_at IS NULL;
    GET DIAGNOSTICS died = ROW_COUNT;
    SELECT coalesce(max(a.attempt), 0) INTO started FROM job_attempts a WHERE a.job_id = job;
    IF started >= attempts_max THEN
        SELECT a.error_code, a.error INTO last_code, last_error
        FROM job_attempts a WHERE a.job_id = job ORDER BY a.attempt DESC LIMIT 1;
        INSERT INTO dead_letters (event_id, job_id, error_class, error_code, last_error, attempts)
        VALUES (event, job, 'exhausted', coalesce(last_code, 'attempts_exhausted'),
                coalesce(last_error, 'every attempt was used'), started);
        UPDATE settlement_events SET status = 'abandoned', status_changed_at = now()
        WHERE id = event AND status = 'recorded';
        RETURN QUERY SELECT 'exhausted'::text, started;
        RETURN;
    END IF;
    IF died > 0 THEN
        RETURN QUERY SELECT 'rescued'::text, started;
        RETURN;
    END IF;
    INSERT INTO job_attempts (event_id, job_id, attempt, worker) VALUES (event, job, started + 1, worker);
    RETURN QUERY SELECT 'run'::text, started + 1;
END;
$$ LANGUAGE plpgsql;
