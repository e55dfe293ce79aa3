-- Starting a group's attempts (one call, one commit): the common case, a job's first attempt
-- on an event that still waits for it, is done for the whole group by two set-based statements;
-- every other job (a settled or stray event, an attempt before this one) goes through
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
$$ LANGUAGE plpgsql;
