-- apalis.get_jobs (apalis-postgres 1.0) is a SQL function, so its UPDATE ... FROM (the batch it
-- just picked) is planned generically: the planner takes LIMIT v_job_count for a tenth of the
-- queue and hash-joins the batch against a sequential scan of the whole apalis.jobs table. With
-- a backlog of 50,000 jobs every fetch cost ~10 ms of server CPU, growing with the backlog. With
-- hash and merge joins off inside the function the batch is joined by the primary key (a nested
-- loop of index lookups: ~1.5 ms for 64 jobs, whatever the backlog). Only this function is
-- affected; it is apalis' own, so `tests::suite::queue` checks the setting is still in force.
ALTER FUNCTION apalis.get_jobs(TEXT, TEXT, INTEGER) SET enable_hashjoin = off;
ALTER FUNCTION apalis.get_jobs(TEXT, TEXT, INTEGER) SET enable_mergejoin = off;
