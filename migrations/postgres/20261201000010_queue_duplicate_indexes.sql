-- apalis-postgres 1.0 leaves two indexes that duplicate others on apalis.jobs: unique_job_id (the
-- primary key's column) and lidx (idx_apalis_jobs_lock_by's). Its own migration
-- 20260824233636_streamline_indices dropped the other duplicates of that first schema. Every
-- enqueue and every fetch (which changes lock_by) wrote an entry into each of them.
DROP INDEX IF EXISTS apalis.unique_job_id;
DROP INDEX IF EXISTS apalis.lidx;
