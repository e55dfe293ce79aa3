-- Statements that run in every job are planned for the tables as they are when they run. A
-- cached generic plan is made once per connection, while a drain's tables (job_attempts, the
-- journal) are still small, and kept while they grow, so a sequential scan chosen for a nearly
-- empty table ran on every call over every row posted since (a drain fell from ~2,000 to ~120
-- postings/s; BENCHMARKS.md, "The drain collapse"). The posting transaction sets this for
-- itself (with its foreign-key checks and triggers); these functions set it for their calls.
ALTER FUNCTION settle_start_attempt(BIGINT, TEXT, TEXT, INTEGER, TEXT, TEXT, BOOLEAN)
    SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION settle_start_attempts(BIGINT[], TEXT[], TEXT[], INTEGER, TEXT, TEXT)
    SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION journal_assert_entries_balanced(BIGINT[])
    SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION apalis.get_jobs(TEXT, TEXT, INTEGER)
    SET plan_cache_mode = force_custom_plan;

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
